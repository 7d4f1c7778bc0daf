"""Draft-length policies: how much to draft each round, and when to stop drafting early.

On a CPU a verify batch of k+1 tokens costs well over one target step and a draft pass is not
free, so speculation wins or loses by how much it drafts. A `CostModel` learns, while the engine
runs, what this machine charges (the target's verify seconds for each batch size, each draft
source's seconds per pass) and how often each source is right (per draft position, and for a
model drafter against its own confidence). Every round gets a prediction from it (expected tokens
and seconds), so the stats can set the predicted rate beside the measured one.

`FixedPolicy` drafts k tokens and stops below a confidence `p_min` (llama.cpp's settings).
`AdaptivePolicy` picks, per round and per draft source, the length that maximises expected tokens
per second, stops a model draft when the next token's expected gain no longer pays for its cost,
and drafts nothing when no length beats a plain target step (probing now and then, so it notices
when drafting starts to pay again).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from copy import copy
from dataclasses import dataclass, field
from typing import Protocol

from specchat.engine.text_kind import TEXT
from specchat.engine.types import Draft, Plan
from specchat.engine.verify_curve import VerifyCurve

_DECAY = 0.97
"""Forgetting factor of the acceptance counts per observation: the estimate follows the
conversation (code, then prose) within a few dozen rounds."""
_PRIOR_ACCEPT, _PRIOR_WEIGHT = 0.6, 2.0
_COST_EMA = 0.2
_PRIOR_STEP_S = 0.1
"""Before anything is measured: a target step takes 0.1 s."""
_PRIOR_PASS_FRACTION = 0.4
"""Before a draft pass is measured: a pass costs 0.4 of a target step."""
_CONF_BINS = (0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.995, 1.01)
_PROBE_EVERY, _PROBE_MAX, _PROBE_LONGEST = 16, 256, 3
"""A declining policy probes after 16 declined rounds, twice as long after each probe that did
not make drafting pay (up to 256): a model drafter's probe first catches up on every token it
missed, so a probe every 16 rounds cost a declining reply 5-10% on a 2-core CPU
(docs/benchmark.md, CPU layouts). A probe drafts at most 3 tokens, at the length a perfect
draft would make pay best."""
_PROBE_FIRST = 4
"""Declined rounds at the start of a turn before its first probe."""
_REALIZED_MIN = 3.0
"""Drafting rounds of a source at a level of the target's running confidence (decayed) after
which what they brought overrules the prediction there: where those rounds made fewer tokens a
second than plain steps, the policy declines the source at that level (probing as when it
predicts a loss). On prose the 0.5B draft's rounds came to 95-160 ms a token against 85-95 for
a plain step while the prediction said they paid (docs/benchmark.md)."""
_PAYBACK_TOKENS = 32
"""A catch-up is paid up front and must be earned back within the reply's next 32 tokens (or
the fewer it may still have): replies often end well before their token limit (the suite's
short prose after 32-38 of 96), and there the prompt's catch-up (250-500 ms for the 0.5B draft
on 2 cores) cost 10-14% of the reply. Since patch 0006 a 32-token catch-up takes the Q4_0 draft
102 ms on AVX2 (benchmarks/gemm_patch.py --last-row), and over twelve short prose replies
catch-ups took 4-9% of the decoding (benchmarks/prompts/prose.toml; docs/benchmark.md)."""
_TARGET_CONF_EMA, _TARGET_CONF_MIN = 0.3, 3
"""The target's running confidence (its top probability at each committed position, free from
the rows every round computes) weighs each new position 0.3, so it follows the text of the
last few tokens; a model catches up on a reply's prompt only once 3 positions of the reply
are in it (the prompt's last row and two steps)."""
_PAD_MAX, _PAD_MARGIN = 4, 0.95
"""A verify batch is padded by at most 4 tokens, and only to a size at least 5% cheaper than its
own (a noisy timing should not pad a batch on a flat curve)."""
_EXPLORE_BONUS = 1.0
_EXPLORE_SAMPLES = 3


class _Rate:
    """A success rate with a prior and exponential forgetting."""

    __slots__ = ("hits", "n")

    def __init__(self, prior: float) -> None:
        self.hits, self.n = prior * _PRIOR_WEIGHT, _PRIOR_WEIGHT

    def add(self, ok: bool) -> None:
        self.hits = self.hits * _DECAY + ok
        self.n = self.n * _DECAY + 1.0

    @property
    def mean(self) -> float:
        return self.hits / self.n

    @property
    def optimistic(self) -> float:
        """The mean with `_EXPLORE_BONUS` extra successes: high while little is known, so a
        length gets tried before it is written off; the bonus fades as evidence comes in."""
        return (self.hits + _EXPLORE_BONUS) / (self.n + _EXPLORE_BONUS)

    def shrink(self) -> None:
        """Keep the estimate, as evidence of only `_PRIOR_WEIGHT` observations."""
        self.hits, self.n = self.mean * _PRIOR_WEIGHT, _PRIOR_WEIGHT


class _Yield:
    """Tokens and seconds of a source's drafting rounds in this reply, with exponential
    forgetting: what drafting actually brought, whatever the cost model predicted."""

    __slots__ = ("tokens", "seconds", "n")

    def __init__(self) -> None:
        self.tokens = self.seconds = self.n = 0.0

    def add(self, tokens: int, seconds: float) -> None:
        self.tokens = self.tokens * _DECAY + tokens
        self.seconds = self.seconds * _DECAY + seconds
        self.n = self.n * _DECAY + 1.0

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("inf")


def _conf_bin(conf: float) -> int:
    return next(i for i, edge in enumerate(_CONF_BINS) if conf < edge)


def _conf_rates() -> list[_Rate]:
    """One rate per confidence bin, each with the bin's upper confidence less 0.05 as prior."""
    return [_Rate(min(edge, 1.0) - 0.05) for edge in _CONF_BINS]


def _monotone(bins: Sequence[_Rate]) -> list[_Rate]:
    """The bins' rates fitted to rise with the target's confidence: each pooled with its
    neighbours wherever a lower bin shows the higher rate (pool adjacent violators, weighted
    by the observations). A draft stands no more often where the target is less sure of the
    text, so drafts refused where it was 80% sure speak for the text it is 55% sure of too (on
    the suite's long prose the 0.5B draft, refused at 0.8, was probed again at 0.5 on that
    level's untouched prior and lost a further 80 ms); pooled by weight, one refusal at a
    level seldom reached does not outweigh many rounds that stood just below it."""
    blocks: list[tuple[_Rate, int]] = []  # a pooled rate and how many bins it covers
    for rate in bins:
        pooled, count = copy(rate), 1
        while blocks and blocks[-1][0].mean > pooled.mean:
            below, covered = blocks.pop()
            pooled.hits += below.hits
            pooled.n += below.n
            count += covered
        blocks.append((pooled, count))
    return [pooled for pooled, count in blocks for _ in range(count)]


def expected_tokens(accept: list[float]) -> float:
    """Tokens a round yields when draft token i stands with probability accept[i] given the
    ones before it stood: 1 (correction or bonus) + sum over i of P(first i+1 all stand)."""
    total, alive = 1.0, 1.0
    for a in accept:
        alive *= a
        total += alive
    return total


@dataclass
class CostModel:
    """What rounds cost on this machine and how often each draft source is right."""

    verify: dict[int, float] = field(default_factory=dict)
    """EMA of verify seconds by batch size (evaluated tokens)."""
    shape: tuple[float, ...] = ()
    """A verify curve timed before on this machine and model (in steps, n = 1, 2, ...; see
    catalog/layout.py): a batch size not seen yet costs the live step times this, so the policy
    knows from its first rounds that some batches are cheap (4 and 8 rows in a Q4_0 layout on
    x86 with AVX-512; 2 and 3 on AVX2 with specchat's patches) where a straight line through the
    sizes it has seen would miss them."""
    verify_count: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    step_then: dict[int | str, float] = field(default_factory=dict)
    """The target step's estimate when each batch size's verify time (key: the size) and each
    source's pass time (key: the source) was last learned. Such a time is read as its share of
    the step then, times the step now (`_now`): the machine's speed moves them all alike, and
    a batch size or source the policy stopped running is not timed again. Read as learned,
    a burst of two busy programs during prose priced the draft's rounds out of reach, and the
    adaptive policy drafted nothing on the code after it (docs/benchmark.md)."""
    pass_s: dict[str, float] = field(default_factory=dict)
    """EMA of the seconds a drafted token's pass takes, by source (per lookup for a source
    without passes): a pass that also read guessed tokens the draft then proposed counts once
    for each of them (`Draft.later_draws`)."""
    catchup_token_s: dict[str, float] = field(default_factory=dict)
    """EMA of the extra seconds per token when a draft model catches up on several committed
    tokens at once (after rounds it did not draft, or after a bonus token). Known to settle
    near 0: passes in step (a bonus and the token before it, at a pass's cost) and declined
    rounds (no pass at all) feed it, so the 0.5B draft's catch-ups, 2.5-3 ms a token, are
    priced at 0.05 after its first, and the policy treats them as free. Pricing them right
    lost more on code and edits than it saved on prose, whatever the payback horizon, and
    with code and prose calibrated apart it still lost on domain text (docs/benchmark.md,
    "The draft's catch-up" and "Code blocks and prose"): kept so. A pass widened by guesses
    (`Draft.widened`) does not feed it: its extra rows are the guesses', and fed, they priced
    every catch-up at half a pass a token and the adaptive policy stopped drafting."""
    by_position: dict[str, list[_Rate]] = field(default_factory=lambda: defaultdict(list))
    by_confidence: dict[str, list[_Rate]] = field(default_factory=dict)
    empty: dict[tuple[str, bool], _Rate] = field(default_factory=dict)
    """How often a model's pass ended in no draft at all (its first token not worth verifying):
    a pass paid for nothing, which the choice to draft must price. Kept apart by whether the
    source's previous pass was empty too: on prose they come in runs (the 0.5B draft's empty
    passes on the suite's long prose followed one another 8 times in 10)."""
    last_empty: dict[str, bool] = field(default_factory=dict)
    """Whether each source's latest pass ended in no draft."""
    kind: str = TEXT
    """What the reply is writing where the round begins (engine/text_kind.py; `writing`):
    what the target's running confidence predicts (`by_target_conf`) and what rounds brought
    (`realized`) are kept for each kind apart (`at`), since the same confidence meant 0.39 of
    the 0.5B draft's tokens standing in prose and 0.96 in code. The rest is the source's
    whatever it writes: in step its own confidence tells the kinds apart, and rates of a kind
    learned from nothing would keep a source out of it (a cold start at the 0.6 prior)."""
    target_conf: float | None = None
    """The target's running confidence in this reply: an EMA of its top probability at each
    committed position (None until the reply's first row)."""
    target_conf_n: int = 0
    """Positions of this reply in `target_conf`."""
    by_target_conf: dict[str, list[_Rate]] = field(default_factory=dict)
    """P(a draft token stands | the target's running confidence when the round began), per
    source and kind of text (`at`), binned: how predictable the text is, read from the target
    for free, priced in before a model pays to catch up (on the prompt, 250-500 ms for the
    0.5B draft on 2 cores, or on the rounds it sat out). Kept across conversations: it ties
    predictability to acceptance, which is the pair's more than the text's."""
    realized: dict[tuple[str, int], _Yield] = field(default_factory=dict)
    """Tokens a second that each source's drafting rounds brought in this reply (a catch-up on
    missed tokens left out: it is paid once), by the kind of text (`at`) and the bin of the
    target's running confidence the round began with: the check on the predictions
    (`AdaptivePolicy`). Kept apart by both, as rounds lost on unsure text or on prose say
    little of sure text or of a code block; a reply starts without it (`start_turn`)."""

    def writing(self, kind: str) -> None:
        """What the reply writes where the next round begins (the engine says, every round)."""
        self.kind = kind

    def at(self, source: str) -> str:
        """The key of `source`'s statistics kept for each kind of text, where the reply is."""
        return f"{source} in {self.kind}"

    @property
    def warm(self) -> bool:
        return 1 in self.verify

    def _now(self, key: int | str, seconds: float) -> float:
        """`seconds` learned for `key` (`step_then`), at the target step as it is now."""
        then = self.step_then.get(key)
        return seconds * self.verify[1] / then if then and 1 in self.verify else seconds

    def _learn(self, table: dict, key: int | str, seconds: float) -> None:
        """Move `table[key]`, taken at the step as it is now, towards `seconds`; remember the
        step it was learned at (a plain step's own time is the step)."""
        if key in table:
            table[key] = self._now(key, table[key])
        _ema(table, key, seconds)
        if key != 1 and 1 in self.verify:
            self.step_then[key] = self.verify[1]

    def pass_time(self, source: str) -> float | None:
        """Seconds a drafted token of `source` takes (a pass, or a lookup), at the step now."""
        seconds = self.pass_s.get(source)
        return None if seconds is None else self._now(source, seconds)

    def verify_s(self, n: int) -> float:
        """Measured where this batch size was seen; else from the known `shape`; else between
        two seen sizes, the straight line between them; beyond the largest, its cost plus the
        least-squares slope per token."""
        if n in self.verify:
            return self._now(n, self.verify[n])
        if n <= len(self.shape):
            return self._step_s() * self.shape[n - 1]
        curve = VerifyCurve({m: self._now(m, v) for m, v in self.verify.items()} or
                            {1: _PRIOR_STEP_S})
        cost = curve.cost(n)
        assert cost is not None  # the curve has a size at least
        return cost

    def _step_s(self) -> float:
        """One target step: measured; else what a measured batch size and the known `shape`
        make of it (a fixed policy may never run a plain step); else the prior."""
        if 1 in self.verify:
            return self.verify[1]
        within = [m for m in self.verify if m <= len(self.shape)]
        if within:
            return self.verify[min(within)] / self.shape[min(within) - 1]
        return _PRIOR_STEP_S

    def batch_for(self, n: int) -> int:
        """The batch that verifies n tokens cheapest: n, or up to `_PAD_MAX` more where a
        larger batch is known to cost less (a Q4_0 layout on x86 verifies 4 rows in 1.4 steps
        and 2 or 3 rows in 1.6-2.1: the engine pads the batch, and drops the padding's rows
        and cache entries). A plain step (n = 1) is never padded."""
        if n <= 1:
            return n
        own = self.verify_s(n)
        sizes = [m for m in range(n + 1, n + _PAD_MAX + 1)
                 if m in self.verify or m <= len(self.shape)]
        best = min(sizes, key=self.verify_s, default=n)
        return best if self.verify_s(best) < own * _PAD_MARGIN else n

    def check_s(self, n: int) -> float:
        """Seconds to verify n tokens, padded as `batch_for` pads them."""
        return self.verify_s(self.batch_for(n))

    def draft_s(self, source: str, length: int, uses_passes: bool, behind: int = 1) -> float:
        """Seconds to draft `length` tokens: for a model, one pass that catches up on the
        `behind` committed tokens it has not seen, then a pass per further token; for a lookup
        drafter, one lookup."""
        known = self.pass_time(source)
        if not uses_passes:
            return known or 0.0
        step = known if known is not None else _PRIOR_PASS_FRACTION * self.verify_s(1)
        catchup = self.catchup_token_s.get(source, step / 4) * max(0, behind - 1)
        return catchup + step * max(1, length)

    def position_rate(self, source: str, i: int, optimistic: bool = False) -> float:
        """P(draft token i stands | the ones before it stood); `optimistic` for choosing a
        length (see `_Rate.optimistic`), the plain estimate for predicting. A position not yet
        tested is assumed as good as the one before it, so longer drafts get tried, but without
        the optimism: a source nothing is known of tries a short draft first, not the longest
        batch that would pay if every token stood (where 8 rows cost little more than 4, an
        untried n-gram source drafted 7 tokens and lost 2.4 steps a round on new prose)."""
        rates = self.by_position[source]
        tested = i < len(rates)
        rate = rates[i] if tested else rates[-1] if rates else _Rate(_PRIOR_ACCEPT)
        return rate.optimistic if optimistic and (tested or i == 0) else rate.mean

    def empty_rate(self, source: str) -> float:
        """P(the source's next pass brings no draft), given whether its latest one did."""
        rate = self.empty.get((source, self.last_empty.get(source, False)))
        return rate.mean if rate else 0.0

    def predicted_accept(self, source: str, optimistic: bool = False) -> float | None:
        """P(a draft token of `source` stands) as the target's running confidence predicts it
        (`by_target_conf`, fitted to rise with it: `_monotone`; the hopeful estimate is capped
        by every surer level's); None before `_TARGET_CONF_MIN` positions of this reply."""
        if self.target_conf is None or self.target_conf_n < _TARGET_CONF_MIN:
            return None
        fitted = _monotone(self.by_target_conf.get(self.at(source)) or _conf_rates())
        return min(rate.optimistic if optimistic else rate.mean
                   for rate in fitted[_conf_bin(self.target_conf):])

    def confidence_rate(self, source: str, conf: float) -> float:
        bins = self.by_confidence.get(source)
        if bins is None:
            return min(conf, _PRIOR_ACCEPT + 0.3)
        return bins[_conf_bin(conf)].mean

    def best_confidence_rate(self, source: str) -> float:
        """The highest `confidence_rate` any confidence of the draft can get."""
        bins = self.by_confidence.get(source)
        return _PRIOR_ACCEPT + 0.3 if bins is None else max(b.mean for b in bins)

    def expect(self, draft: Draft) -> tuple[float, float]:
        """(expected tokens, expected seconds) of a round that verifies `draft`."""
        if draft.conf:
            accept = [self.confidence_rate(draft.source, c) for c in draft.conf]
        else:
            accept = [self.position_rate(draft.source, i) for i in range(len(draft))]
        seconds = self.check_s(1 + len(draft))
        if draft.drafter_ran:
            seconds += self.draft_s(draft.source, len(draft), draft.uses_passes, draft.behind)
        return expected_tokens(accept), seconds

    def observe(self, draft: Draft, accepted: int, draft_s: float, verify_s: float, batch: int,
                target_conf: Sequence[float] = ()) -> None:
        """Learn from a finished round: a verify pass of `batch` tokens (padding included; 0
        where the pass also evaluated a backlog, a prefill, whose time is no verify cost) in
        `verify_s`, the draft in `draft_s`, `accepted` of the draft's tokens stood, and the
        target's top probability at each position the round committed."""
        if batch:
            self._learn(self.verify, batch, verify_s)
            self.verify_count[batch] += 1
        source = draft.source
        tested = min(len(draft), accepted + 1)  # tokens after the first refusal were not tested
        if source:  # before the running confidence moves on: both key on where the round began
            self._observe_source(draft, accepted, tested, draft_s, verify_s, batch)
        self._observe_target_conf(source, accepted, tested, target_conf)

    def _observe_source(self, draft: Draft, accepted: int, tested: int, draft_s: float,
                        verify_s: float, batch: int) -> None:
        """What a round with a draft source says of its costs and its acceptance."""
        source = draft.source
        if draft.uses_passes and draft.catchup_s > 0:  # a pass ran: did it bring a draft?
            after = self.last_empty.get(source, False)
            self.empty.setdefault((source, after), _Rate(0.0)).add(not draft.tokens)
            self.last_empty[source] = not draft.tokens
        caught_up_s = 0.0  # what catching up beyond a round's own correction or bonus took
        if draft.uses_passes:
            if draft.later_draws:  # seconds a token: a pass that read a guess drew several
                self._learn(self.pass_s, source, (draft_s - draft.catchup_s) / draft.later_draws)
            if draft.behind > 1 and (pass_s := self.pass_time(source)) is not None \
                    and not draft.widened:
                extra = max(0.0, draft.catchup_s - pass_s) / (draft.behind - 1)
                _ema(self.catchup_token_s, source, extra)
                caught_up_s = extra * max(0, draft.behind - 2)
        elif draft.tokens:
            self._learn(self.pass_s, source, draft_s)
        if batch and draft.drafter_ran and self.target_conf is not None:
            self.realized.setdefault((self.at(source), _conf_bin(self.target_conf)), _Yield()).add(
                accepted + 1, draft_s - caught_up_s + verify_s)
        rates = self.by_position[source]
        for i in range(tested):
            if i == len(rates):
                rates.append(_Rate(self.position_rate(source, i)))
            rates[i].add(i < accepted)
        if draft.conf:
            bins = self.by_confidence.setdefault(source, _conf_rates())
            for i in range(tested):
                bins[_conf_bin(draft.conf[i])].add(i < accepted)

    def _observe_target_conf(self, source: str, accepted: int, tested: int,
                             target_conf: Sequence[float]) -> None:
        """Calibrate the running confidence the round began with against the draft tokens it
        tested, then move it on by the round's positions."""
        if source and tested and self.target_conf is not None:
            bins = self.by_target_conf.setdefault(self.at(source), _conf_rates())
            for i in range(tested):
                bins[_conf_bin(self.target_conf)].add(i < accepted)
        for conf in target_conf:
            old = self.target_conf
            self.target_conf = conf if old is None else old + _TARGET_CONF_EMA * (conf - old)
            self.target_conf_n += 1

    def realized_here(self, source: str) -> _Yield | None:
        """What `source`'s rounds brought at the target's present running confidence."""
        if self.target_conf is None:
            return None
        return self.realized.get((self.at(source), _conf_bin(self.target_conf)))

    def new_conversation(self) -> None:
        """Keep what the machine costs; keep how well each source drafted only as a prior of
        `_PRIOR_WEIGHT` observations, so the new conversation's own acceptance takes over
        within a few rounds."""
        for rates in [*self.by_position.values(), *self.by_confidence.values(),
                      self.empty.values()]:
            for rate in rates:
                rate.shrink()

    def start_turn(self) -> None:
        """A reply begins: what its rounds brought, whether the last pass was empty, the
        target's running confidence and what the reply writes start again (the rates learned
        stay)."""
        self.realized.clear()
        self.last_empty.clear()
        self.target_conf, self.target_conf_n = None, 0
        self.kind = TEXT


def _ema(table: dict, key: object, value: float) -> None:
    old = table.get(key)
    table[key] = value if old is None else old + _COST_EMA * (value - old)


@dataclass
class _FixedPlan:
    k_max: int
    p_min: float
    declined: bool = False
    asked: int = 0

    def k(self, source: str, uses_passes: bool, behind: int = 0) -> int:
        self.asked = self.k_max
        return self.k_max

    def keep(self, source: str, i: int, conf: float) -> bool:
        return conf >= self.p_min

    def worth_a_pass(self, source: str, i: int) -> bool:
        return True  # llama.cpp's rule: draft on to k unless the confidence falls below p_min


class Policy(Protocol):
    name: str
    costs: CostModel

    def plan(self, cap: int) -> Plan: ...

    def start_turn(self) -> None:
        """A reply begins (a new message may be another kind of text)."""
        ...


class FixedPolicy:
    """Draft k tokens every round, stopping below `p_min`; still predicts each round's rate."""

    def __init__(self, k: int, p_min: float = 0.0, costs: CostModel | None = None) -> None:
        self.k, self.p_min = k, p_min
        self.name = f"fixed k={k}"
        self.costs = costs or CostModel()

    def plan(self, cap: int) -> Plan:
        return _FixedPlan(min(self.k, cap), self.p_min)

    def start_turn(self) -> None:
        pass  # the same k every round, whatever the text


class _AdaptivePlan:
    def __init__(self, policy: AdaptivePolicy, cap: int) -> None:
        self.policy, self.cap = policy, cap
        self.rate = 0.0
        """The best expected rate of this round (tokens/s): a token is kept only if it adds
        tokens faster than this."""
        self.gain = 1.0
        self.declined = False
        self.probing = False
        """This round is a probe: it keeps every token it drafts, to measure acceptance."""
        self.asked = 0

    def k(self, source: str, uses_passes: bool, behind: int = 0) -> int:
        self.asked = self._choose(source, uses_passes, behind)
        return self.asked

    def _rate(self, source: str, n: int, uses_passes: bool, behind: int,
              accept: list[float], perfect: bool = False) -> float:
        """Expected tokens a second of a round drafting n tokens; for a model, a share of its
        rounds (`CostModel.empty`) pays a pass and brings only the target's own token (not
        for a `perfect` draft, whose first token is always worth verifying)."""
        costs = self.policy.costs
        seconds = costs.draft_s(source, n, uses_passes, behind) + costs.check_s(1 + n)
        tokens = expected_tokens(accept[:n])
        empty = 0.0 if perfect else costs.empty_rate(source)
        if empty:
            wasted_s = costs.draft_s(source, 1, uses_passes, behind) + costs.verify_s(1)
            tokens, seconds = empty + (1 - empty) * tokens, empty * wasted_s + (1 - empty) * seconds
        return tokens / seconds

    def _pays(self, rate: float, plain: float, catchup_s: float) -> bool:
        """Drafting at `rate` beats plain steps over the reply's next tokens (at most
        `_PAYBACK_TOKENS`), once the draft model has caught up (`catchup_s`, paid once: a
        drafting model stays in step)."""
        ahead = min(max(self.cap, 1), _PAYBACK_TOKENS)
        return ahead / rate + catchup_s < ahead / plain

    def _choose(self, source: str, uses_passes: bool, behind: int) -> int:
        p, costs = self.policy, self.policy.costs
        cap = min(self.cap, p.k_max)
        if not costs.warm:  # first a plain target step, the cost everything is measured against
            return 0
        plain = 1.0 / costs.verify_s(1)
        # a drafting model is behind by the round's correction or bonus token only; what it
        # missed while the policy declined (the whole prompt, at a reply's start) is caught up
        # once, and priced against the tokens the reply has left, not against one round
        steady = min(behind, 2)
        catchup_s = (costs.draft_s(source, 1, uses_passes, behind)
                     - costs.draft_s(source, 1, uses_passes, steady))
        accept = [costs.position_rate(source, i, optimistic=True) for i in range(cap)]
        # before a model pays to catch up (on the prompt, or on rounds it sat out), the text
        # must look predictable: the target's running confidence, calibrated against what
        # stood, caps the rates learned so far (in step, the draft's own confidence decides)
        guess = costs.predicted_accept(source) if catchup_s > 0 else 1.0
        if guess is not None:
            accept = [min(a, guess) for a in accept]
        rates = [self._rate(source, n, uses_passes, steady, accept) for n in range(1, cap + 1)]
        best_len = 1 + max(range(cap), key=rates.__getitem__) if cap else 0
        seen = costs.realized_here(source)
        lost = seen is not None and seen.n >= _REALIZED_MIN and seen.rate < plain
        if (not cap or lost or guess is None
                or not self._pays(rates[best_len - 1], plain, catchup_s)):
            self.rate = plain
            self.declined = True
            p.declines += 1
            if p.probed:  # the last probe did not make drafting pay: probe half as often
                p.probe_every, p.probed = min(2 * p.probe_every, _PROBE_MAX), False
            p.since_probe += 1
            # probe now and then, but only where a draft as good as the text's predictability
            # allows at best (perfect, for a draft in step) could pay at all
            hope = costs.predicted_accept(source, optimistic=True) if catchup_s > 0 else 1.0
            if hope is None:
                return 0
            ideal = [self._rate(source, n, uses_passes, steady, [hope] * cap, perfect=True)
                     for n in range(1, min(cap, _PROBE_LONGEST) + 1)]
            if (not ideal or not self._pays(max(ideal), plain, catchup_s)
                    or p.since_probe < p.probe_every):
                return 0
            p.since_probe, p.probed = 0, True
            self.declined, self.probing = False, True
            return 1 + max(range(len(ideal)), key=ideal.__getitem__)
        p.probed, p.probe_every = False, _PROBE_EVERY
        self.rate = rates[best_len - 1]
        if (best_len < cap and best_len + 1 > len(costs.shape)
                and costs.verify_count[best_len + 2] < _EXPLORE_SAMPLES):
            best_len += 1  # measure the next batch size before trusting its extrapolation
        # a model drafter drafts as far as `keep` lets it: its confidence says more than the
        # average over positions
        return cap if uses_passes else best_len

    def keep(self, source: str, i: int, conf: float) -> bool:
        """Keep token i if drafting on to some length L > i adds tokens faster than the round's
        best rate: expected tokens of positions i..L-1 against the extra verify seconds of the
        longer batch and the passes still to run (token i's own has run), with token i's chance
        from the draft's confidence (calibrated against what was accepted) and later ones from
        the positions' rates. Looking past the next token lets a draft grow through an
        expensive batch size to a cheap one (from 3 rows to 4 in a Q4_0 layout on AVX-512)."""
        if self.probing:
            return i < self.asked
        self.gain *= self.policy.costs.confidence_rate(source, conf)
        return self._grows(source, i, self.gain, passes_paid=1)

    def worth_a_pass(self, source: str, i: int) -> bool:
        """Whether token i, at the draft's most trusted confidence, would pay for its pass as
        well as for its rows: the pass is run only then. On 2 cores a pass of the 0.5B draft
        costs a third of a target step, and after most prose rounds of 3 tokens (4 rows, where
        5 cost far more) no confidence could have kept a fourth."""
        if self.probing:
            return i < self.asked
        return self._grows(source, i, self.gain * self.policy.costs.best_confidence_rate(source),
                           passes_paid=0)

    def _grows(self, source: str, i: int, gain: float, passes_paid: int) -> bool:
        """Drafting token i (standing with probability `gain`, with the ones before it) and on
        to some longer length adds tokens faster than the round's best rate (see `keep`); of
        the passes that drafting takes, `passes_paid` already ran (token i's own, once it is
        drafted) and cost nothing more."""
        costs = self.policy.costs
        cap = min(self.cap, self.policy.k_max)
        base_s, pass_s = costs.check_s(1 + i), costs.draft_s(source, 1, True)
        alive, tokens = gain, 0.0
        for length in range(i + 1, max(cap, i + 1) + 1):
            tokens += alive
            extra_s = costs.check_s(1 + length) - base_s + (length - i - passes_paid) * pass_s
            if tokens - self.rate * extra_s >= 0:
                return True
            alive *= costs.position_rate(source, length)
        return False


class AdaptivePolicy:
    """Choose each round's draft length from the cost model (see the module docstring)."""

    def __init__(self, k_max: int = 8, costs: CostModel | None = None) -> None:
        self.k_max = k_max
        self.name = f"adaptive k<={k_max}"
        self.costs = costs or CostModel()
        self.declines = 0
        self.since_probe = 0
        self.probe_every = _PROBE_EVERY
        self.probed = False
        """A probe ran since drafting last paid."""

    def plan(self, cap: int) -> Plan:
        return _AdaptivePlan(self, cap)

    def start_turn(self) -> None:
        """A new message may be another kind of text (code after prose): the probe schedule
        starts again, with the first probe after `_PROBE_FIRST` declined rounds, so a turn
        where drafting pays does not wait out a schedule that grew on prose."""
        self.probe_every, self.probed = _PROBE_EVERY, False
        self.since_probe = _PROBE_EVERY - _PROBE_FIRST
        self.costs.start_turn()
