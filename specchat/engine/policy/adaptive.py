"""The adaptive policy: per round and per draft source, the draft length that maximises
expected tokens a second on this machine; a model's draft stops when the next token's expected
gain no longer pays for its cost; no draft when no length beats a plain target step, with
probes now and then (`ProbeSchedule`). The measurements behind each rule: docs/lab/."""

from __future__ import annotations

from specchat.engine.policy.base import Policy, PricedPlan
from specchat.engine.policy.branching import TreeSettings
from specchat.engine.policy.cost_model import CostModel
from specchat.engine.policy.kind import PolicyKind
from specchat.engine.policy.rates import expected_tokens
from specchat.engine.policy.schedule import PROBE_WHY, ProbeSchedule
from specchat.engine.types import Plan

PROBE_LONGEST = 3
"""A probe drafts at most 3 tokens, at the length a perfect draft would make pay best."""
REALIZED_MIN = 3.0
"""Drafting rounds of a source at a level of the running confidence after which what they
brought overrules the prediction there (declining where they made fewer tokens a second than
plain steps)."""
EXPLORE_SAMPLES = 3
"""Rounds a batch size one past the best is timed before its extrapolation is trusted."""


class AdaptivePolicy(Policy):
    """Choose each round's draft length from the cost model."""

    kind = PolicyKind.ADAPTIVE

    def __init__(self, k_max: int = 8, costs: CostModel | None = None,
                 tree: TreeSettings | None = None) -> None:
        self.k_max, self.tree = k_max, tree
        self.name = f"adaptive k<={k_max}" + (" tree" if tree else "")
        self.costs = costs or CostModel()
        self.probes = ProbeSchedule()

    def _plan(self, cap: int) -> Plan:
        return _AdaptivePlan(self, cap)

    def start_turn(self) -> None:
        self.probes.new_reply()
        self.costs.start_turn()


class _AdaptivePlan(PricedPlan):
    """One round's choice, made when the drafter asks (`k`), then token by token (`keep`)."""

    def __init__(self, policy: AdaptivePolicy, cap: int) -> None:
        self.costs, self.probes = policy.costs, policy.probes
        self.branching = policy.tree.branching(priced=True) if policy.tree else None
        self.cap = min(cap, policy.k_max)
        self.left = cap
        """Tokens the reply may still write: a catch-up must pay back before its end."""
        self.rate = 0.0
        """The best expected rate of this round (tokens/s): a token is kept only if it adds
        tokens faster than this."""
        self.gain = 1.0
        self.declined = False
        self.why = ""
        self.resumed = ""
        self.probing = False
        """This round is a probe: it keeps every token it drafts, to measure acceptance."""
        self.asked = 0

    def k(self, source: str, uses_passes: bool, behind: int = 0) -> int:
        self.asked = self._choose(source, uses_passes, behind)
        return self.asked

    def _rate(self, source: str, n: int, uses_passes: bool, behind: int,
              accept: list[float], perfect: bool = False) -> float:
        """Expected tokens a second of a round drafting n tokens; for a model, a share of its
        rounds (`CostModel.empty_rate`) pays a pass and brings only the target's own token
        (not for a `perfect` draft, whose first token is always worth verifying)."""
        machine = self.costs.machine
        seconds = machine.round_s(source, n, uses_passes, behind)
        tokens = expected_tokens(accept[:n])
        empty = 0.0 if perfect else self.costs.empty_rate(source)
        if empty:
            wasted_s = machine.draft_s(source, 1, uses_passes, behind) + machine.verify_s(1)
            tokens, seconds = empty + (1 - empty) * tokens, empty * wasted_s + (1 - empty) * seconds
        return tokens / seconds

    def _pays(self, rate: float, plain: float, catchup_s: float) -> bool:
        return self.costs.pays_back(rate, plain, catchup_s, self.left)

    def _choose(self, source: str, uses_passes: bool, behind: int) -> int:
        costs, machine, cap = self.costs, self.costs.machine, self.cap
        if not machine.warm:  # first a plain target step, the cost everything is measured against
            return 0
        plain = 1.0 / machine.verify_s(1)
        # a drafting model is behind by the round's correction or bonus only; what it missed
        # while the policy declined (the whole prompt, at a reply's start) is caught up once,
        # and priced against the tokens the reply has left, not against one round
        steady = min(behind, 2)
        catchup_s = (machine.draft_s(source, 1, uses_passes, behind)
                     - machine.draft_s(source, 1, uses_passes, steady))
        accept = [costs.acceptance.position_rate(source, i, optimistic=True) for i in range(cap)]
        # before a model pays to catch up, the text must look predictable: the target's running
        # confidence, calibrated against what stood, caps the rates learned so far
        guess = costs.predicted_accept(source) if catchup_s > 0 else 1.0
        if guess is not None:
            accept = [min(a, guess) for a in accept]
        rates = [self._rate(source, n, uses_passes, steady, accept) for n in range(1, cap + 1)]
        best_len = 1 + max(range(cap), key=rates.__getitem__) if cap else 0
        seen = costs.reply.realized_here(source)
        lost = seen is not None and seen.n >= REALIZED_MIN and seen.rate < plain
        if (not cap or lost or guess is None
                or not self._pays(rates[best_len - 1], plain, catchup_s)):
            if lost and seen is not None:
                self.why = (f"its drafts here brought {seen.rate:.1f} tok/s, plain steps "
                            f"{plain:.1f}")
            elif guess is None:
                self.why = "the text did not look predictable enough to catch the draft up"
            elif cap:
                catchup = (f", after a {catchup_s * 1000:.0f} ms catch-up"
                           if catchup_s >= 0.0005 else "")
                self.why = (f"a {best_len}-token draft was expected at "
                            f"{rates[best_len - 1]:.1f} tok/s{catchup}, plain steps "
                            f"{plain:.1f}")
            return self._decline(source, uses_passes, steady, catchup_s, plain)
        self.probes.paid()
        self.rate = rates[best_len - 1]
        if (best_len < cap and best_len + 1 > len(machine.shape)
                and machine.verify_count[best_len + 2] < EXPLORE_SAMPLES):
            best_len += 1  # measure the next batch size before trusting its extrapolation
        # a model drafter drafts as far as `keep` lets it: its confidence says more than the
        # average over positions
        return cap if uses_passes else best_len

    def _decline(self, source: str, uses_passes: bool, steady: int, catchup_s: float,
                 plain: float) -> int:
        """No draft this round, unless a probe is due and a draft as good as the text's
        predictability allows at best (perfect, for a draft in step) could pay at all."""
        self.rate, self.declined = plain, True
        self.probes.declined()
        hope = self.costs.predicted_accept(source, optimistic=True) if catchup_s > 0 else 1.0
        if hope is None:
            return 0
        ideal = [self._rate(source, n, uses_passes, steady, [hope] * self.cap, perfect=True)
                 for n in range(1, min(self.cap, PROBE_LONGEST) + 1)]
        if not ideal or not self._pays(max(ideal), plain, catchup_s) or not self.probes.due:
            return 0
        self.resumed = PROBE_WHY
        self.probes.probe()
        self.declined, self.probing = False, True
        return 1 + max(range(len(ideal)), key=ideal.__getitem__)

    def keep(self, source: str, i: int, conf: float) -> bool:
        """Keep token i if drafting on to some length L > i adds tokens faster than the round's
        best rate, with token i's chance from the draft's confidence (calibrated) and later
        ones from the positions' rates. Looking past the next token lets a draft grow through
        an expensive batch size to a cheap one."""
        if self.probing:
            return i < self.asked
        self.gain *= self.costs.acceptance.confidence_rate(source, conf)
        return self._grows(source, i, self.gain, passes_paid=1)

    @property
    def width(self) -> int:
        return self.branching.width if self.branching and not self.probing else 1

    @property
    def p_branch(self) -> float:
        return self.branching.p_max if self.branching else 0.0

    def alternatives(self, source: str, i: int, conf: float | None, chances: list[float]) -> int:
        """Alternatives that add tokens at least as fast as the round's best rate (none in a
        probe, which measures the chain)."""
        if self.branching is None or self.probing:
            return 0
        costs = self.costs
        return self.branching.alternatives(costs.branches, costs.acceptance, costs.machine,
                                           source, i, conf, chances, 1 + i + 1, self.rate)

    def worth_a_pass(self, source: str, i: int) -> bool:
        """Whether token i, at the draft's most trusted confidence, would pay for its pass as
        well as for its rows: the pass is run only then."""
        if self.probing:
            return i < self.asked
        best = self.costs.acceptance.best_confidence_rate(source)
        return self._grows(source, i, self.gain * best, passes_paid=0)

    def _grows(self, source: str, i: int, gain: float, passes_paid: int) -> bool:
        """Drafting token i (standing with probability `gain`, with the ones before it) and on
        to some longer length adds tokens faster than the round's best rate; of the passes
        that drafting takes, `passes_paid` already ran and cost nothing more."""
        machine = self.costs.machine
        base_s, pass_s = machine.check_s(1 + i), machine.draft_s(source, 1, True)
        alive, tokens = gain, 0.0
        for length in range(i + 1, max(self.cap, i + 1) + 1):
            tokens += alive
            extra_s = machine.check_s(1 + length) - base_s + (length - i - passes_paid) * pass_s
            if tokens - self.rate * extra_s >= 0:
                return True
            alive *= self.costs.acceptance.position_rate(source, length)
        return False
