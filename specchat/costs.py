"""What speculation costs on this machine and what it buys: the arithmetic that turns the costs
specchat.timing measured and an acceptance into an expected speedup.

A round that drafts k tokens costs k draft passes and one verify of k+1 tokens; it yields the
expected-accepted-length number of tokens (`engine.policy.expected_tokens`). Against a
target-only step both are counted in steps, so the speedup is
`expected_tokens(accept[:k]) / (verify(k+1) + k * draft)` (with `between`, what a step pays
beside its pass, added once to each side). On a CPU verify(n) grows almost
linearly with n and that is why speculation loses there; on a GPU it stays near one step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from specchat.engine.events import RoundEvent
from specchat.engine.policy import expected_tokens
from specchat.engine.verify_curve import VerifyCurve

FLAT_SLOPE = 0.02
"""A GPU's verify curve for the what-if: n tokens cost 1 + 0.02 (n - 1) steps, so a batch of 8
costs about one step (the GPU curves measured, and how, are in docs/gpu.md)."""


@dataclass(frozen=True)
class Costs:
    verify: tuple[float, ...]
    """Milliseconds to verify n = 1, 2, ... tokens."""
    draft: float
    """Milliseconds of one draft pass (0 for a drafter with no model: n-gram lookup)."""
    depth: int = 0
    """The context depth they were timed at."""
    verify_spread: tuple[float, ...] = ()
    """Milliseconds: the interquartile range of each size's repeats (empty: not measured)."""
    between: float = 0.0
    """Milliseconds a step pays beside the model's pass (sampling, Python), and a round pays
    once: where the step it is measured against is a whole loop's, not a pass alone."""

    def steps(self, n: int) -> float:
        """Verifying n tokens, in target-only steps (past the measured sizes, by the one rule
        every prediction uses: engine/verify_curve.py)."""
        cost = VerifyCurve.from_sizes(self.verify).cost(n)
        assert cost is not None  # a Costs always has its one-token step
        return cost / self.verify[0]

    def steps_spread(self, n: int) -> float | None:
        """The spread of verifying n tokens, in target steps (None past the measured sizes)."""
        if n > len(self.verify_spread):
            return None
        return self.verify_spread[n - 1] / self.verify[0]

    def unresolved(self, up_to: int) -> list[int]:
        """The sizes up to `up_to` whose timings spread wider than the difference to the next
        size: there the curve's shape is within its noise."""
        last = min(up_to, len(self.verify_spread), len(self.verify) - 1)
        return [n for n in range(1, last + 1)
                if self.verify_spread[n - 1] > abs(self.verify[n] - self.verify[n - 1])]

    @property
    def draft_steps(self) -> float:
        return self.draft / self.verify[0]

    @property
    def between_steps(self) -> float:
        return self.between / self.verify[0]

    def flat(self) -> Costs:
        """The same step and draft pass with a GPU's flat verify curve."""
        return replace(self, verify=tuple(self.verify[0] * (1 + FLAT_SLOPE * i)
                                          for i in range(len(self.verify))), verify_spread=())

    def free_drafter(self) -> Costs:
        return replace(self, draft=0.0)


def speedup(costs: Costs, accept: Sequence[float], k: int) -> float:
    """Expected tokens of a k-token round over its cost in target steps; `accept[i]` is the
    chance draft token i stands given the ones before it stood."""
    if k == 0:
        return 1.0
    return (expected_tokens(list(accept[:k])) * (1 + costs.between_steps)
            / (costs.steps(k + 1) + k * costs.draft_steps + costs.between_steps))


ALT_STANDS = 0.3
"""The what-if chance that a draft tree's alternative is the target's choice where the chain's
token beside it was refused, before a conversation measured one."""


def tree_speedup(costs: Costs, accept: Sequence[float], k: int, alt_stands: float) -> float:
    """A draft tree of one alternative beside each of k draft tokens (2k rows to verify, no
    more draft passes: the alternatives come from the rows the chain was drawn from): an
    alternative adds a token where the round reaches it, the chain's token is refused and the
    alternative stands (`alt_stands`)."""
    if k == 0:
        return 1.0
    reach, extra = 1.0, 0.0
    for a in accept[:k]:
        extra += reach * (1.0 - a) * alt_stands
        reach *= a
    return ((expected_tokens(list(accept[:k])) + extra) * (1 + costs.between_steps)
            / (costs.steps(2 * k + 1) + k * costs.draft_steps + costs.between_steps))


def branch_stands(rounds: Iterable[RoundEvent]) -> tuple[float, int] | None:
    """How often an alternative stood where it was tested, over the rounds, and how many were
    tested (None: none was)."""
    tested = stood = 0
    for r in rounds:
        tested += r.branches_tested
        stood += r.branch_stood
    return (stood / tested, tested) if tested else None


def best_k(costs: Costs, accept: Sequence[float], k_max: int = 8) -> tuple[int, float]:
    """The k (0 = no drafting) with the highest expected speedup, and that speedup."""
    return max(((k, speedup(costs, accept, k)) for k in range(min(k_max, len(accept)) + 1)),
               key=lambda pair: pair[1])


def break_even(costs: Costs, k: int) -> float | None:
    """The acceptance (the same at every position) at which drafting k tokens a round is as
    fast as the target alone; None where even a draft that is always right does not pay."""
    if k < 1 or speedup(costs, [1.0] * k, k) <= 1.0:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if speedup(costs, [mid] * k, k) < 1.0 else (lo, mid)
    return hi


def conditional_rates(rounds: Iterable[tuple[int, int]], k: int) -> list[tuple[float, int]]:
    """Conditional acceptance at each draft position from (drafted, accepted) per round: of the
    rounds whose first i draft tokens all stood and that drafted an (i+1)-th, the share where
    it stood too, with the number of rounds it is taken over. It is what the expected accepted
    length (`engine.policy.expected_tokens`) takes."""
    tried, stood = [0] * k, [0] * k
    for drafted, accepted in rounds:
        for i in range(min(drafted, k)):
            if accepted < i:
                break
            tried[i] += 1
            stood[i] += accepted > i
    return [(s / t if t else 0.0, t) for s, t in zip(stood, tried)]


OFF_BY = 0.15
"""A turn's prediction this far from its measurement has a cost left out, and it is named."""


@dataclass(frozen=True)
class TurnCheck:
    """A turn's speedup as the cost curve predicts it for the rounds the turn really ran
    (their draft lengths and verdicts), beside the speedup the turn measured."""

    k: int
    predicted: float
    measured: float
    left_out: str
    """The cost the prediction left out, from the turn's own round timings, where the two
    differ by more than OFF_BY (else empty)."""

    @property
    def off(self) -> float:
        return self.measured / self.predicted - 1


@dataclass(frozen=True)
class MeasuredTurn:
    """What a finished turn measured, as the costs screen compares it with the curve."""

    k: int
    speedup: float
    baseline_tps: float | None = None
    """The turn's own target-only rate, at its depth: its speedup's yardstick."""
    rounds: tuple[RoundEvent, ...] = ()
    """Its rounds in order (the first yields the first token, outside the decode rate)."""


def check_turn(costs: Costs, turn: MeasuredTurn) -> TurnCheck | None:
    """Predict the turn from the curve and name what the prediction left out. None: no rounds
    decoded."""
    k, measured, baseline_tps, rounds = turn.k, turn.speedup, turn.baseline_tps, turn.rounds
    decode = rounds[1:]
    if not decode:
        return None
    step = costs.verify[0]
    verify = [costs.steps(r.drafted + 1) * step for r in decode]
    round_ms = [v + r.drafted * costs.draft for v, r in zip(verify, decode)]
    predicted = sum(r.emitted for r in decode) * step / sum(round_ms)
    if abs(measured / predicted - 1) <= OFF_BY:
        return TurnCheck(k, predicted, measured, "")
    n = len(decode)
    walls = [(b.t_s - a.t_s) * 1000 for a, b in zip(rounds, rounds[1:])]
    parts = {
        "draft passes beyond one per drafted token (the draft catching up)":
            sum(r.draft_s * 1000 - r.drafted * costs.draft for r in decode) / n,
        "Python and sampling between the passes":
            sum(w - (r.draft_s + r.verify_s) * 1000 for w, r in zip(walls, decode)) / n,
        "verify passes slower than the curve (another depth or a busy moment)":
            sum(r.verify_s * 1000 - v for v, r in zip(verify, decode)) / n,
    }
    name, ms = max(parts.items(), key=lambda item: abs(item[1]))
    words = f"{name}: {ms:+.0f} ms a round beside the predicted round's {sum(round_ms) / n:.0f} ms"
    if baseline_tps:  # the measured speedup's own yardstick: a target step at the turn's depth
        turn_step = 1000 / baseline_tps
        if abs(turn_step / step - 1) > OFF_BY and abs(turn_step - step) > abs(ms):
            words = (f"a target step at the turn's depth: {turn_step:.0f} ms against the "
                     f"{step:.0f} ms timed here")
    return TurnCheck(k, predicted, measured, words)
