"""What rounds cost on this machine: the target's verify seconds by batch size, each draft
source's seconds a pass, a draft model's catch-up a token. Learned while the engine runs, and
kept across conversations (docs/lab/: what these estimates were measured to do)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from specchat.engine.policy.rates import ema
from specchat.engine.verify_curve import VerifyCurve

COST_EMA = 0.2
PRIOR_STEP_S = 0.1
"""Before anything is measured: a target step takes 0.1 s."""
PRIOR_PASS_FRACTION = 0.4
"""Before a draft pass is measured: a pass costs 0.4 of a target step."""
PAD_MAX, PAD_MARGIN = 4, 0.95
"""A verify batch is padded by at most 4 tokens, and only to a size at least 5% cheaper than its
own (a noisy timing should not pad a batch on a flat curve)."""


@dataclass
class MachineCosts:
    """Seconds, learned as exponential averages and read at the target step as it is now."""

    verify: dict[int, float] = field(default_factory=dict)
    """Verify seconds by batch size (evaluated tokens); the size 1 is a plain target step."""
    shape: tuple[float, ...] = ()
    """A verify curve timed before on this machine and model (in steps, n = 1, 2, ...;
    catalog/layout.py): a batch size not seen yet costs the live step times this, so the policy
    knows from its first rounds which batches are cheap."""
    shape_step_s: float | None = None
    """The plain step, in seconds, when `shape` was timed. Where the step is slower now, a batch
    is priced at what it cost then (never below a step): on a 2-core machine the target's
    plain step ran at 21 or at 27-36 ms from one moment to the next while a batch of 4 took
    45-48 ms at both, and the shape scaled by the slow step priced drafting out of code's
    reach (docs/lab/2026-12-07-what-code-can-reach-here.md)."""
    verify_count: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    pass_s: dict[str, float] = field(default_factory=dict)
    """Seconds a drafted token's pass takes, by source (a lookup, for a source without passes):
    a pass that also read guessed tokens the draft then proposed counts once for each."""
    catchup_token_s: dict[str, float] = field(default_factory=dict)
    """Extra seconds a token when a draft model catches up on several committed tokens at once.
    Settles near 0 and is kept so: priced right, it lost more on code than it saved on prose
    (docs/lab/2026-12-03-what-declining-costs-and-catch-ups-that.md)."""
    verify_step_then: dict[int, float] = field(default_factory=dict)
    """The target step when each batch size's time was last learned (`now`)."""
    pass_step_then: dict[str, float] = field(default_factory=dict)
    """The target step when each source's pass time was last learned (`now`)."""

    @property
    def warm(self) -> bool:
        return 1 in self.verify

    def _now(self, seconds: float, then: float | None) -> float:
        """`seconds` learned when the step took `then`, at the step as it is now: the machine's
        speed moves every cost alike, and a size or source no longer run is not timed again
        (read as learned, a busy burst priced drafting out of reach: docs/lab/)."""
        return seconds * self.verify[1] / then if then and 1 in self.verify else seconds

    def _learn(self, table: dict, then: dict, key: int | str, seconds: float) -> None:
        """Move `table[key]`, taken at the step as it is now, towards `seconds`, and remember
        the step it was learned at (a plain step's own time is the step)."""
        if key in table:
            table[key] = self._now(table[key], then.get(key))
        ema(table, key, seconds, COST_EMA)
        if key != 1 and 1 in self.verify:
            then[key] = self.verify[1]

    def learn_verify(self, batch: int, seconds: float) -> None:
        self._learn(self.verify, self.verify_step_then, batch, seconds)
        self.verify_count[batch] += 1

    def learn_pass(self, source: str, seconds: float) -> None:
        self._learn(self.pass_s, self.pass_step_then, source, seconds)

    def learn_catchup(self, source: str, seconds_a_token: float) -> None:
        ema(self.catchup_token_s, source, seconds_a_token, COST_EMA)

    def pass_time(self, source: str) -> float | None:
        """Seconds a drafted token of `source` takes (a pass, or a lookup), at the step now."""
        seconds = self.pass_s.get(source)
        return None if seconds is None else self._now(seconds, self.pass_step_then.get(source))

    def verify_s(self, n: int) -> float:
        """Measured where this batch size was seen; else from the known `shape`; else by the
        verify curve's one rule for sizes it has not timed (engine/verify_curve.py)."""
        if n in self.verify:
            return self._now(self.verify[n], self.verify_step_then.get(n))
        if n <= len(self.shape):
            step = self.step_s()
            if self.shape_step_s is not None and step > self.shape_step_s:
                return max(step, self.shape_step_s * self.shape[n - 1])
            return step * self.shape[n - 1]
        curve = VerifyCurve({m: self._now(v, self.verify_step_then.get(m))
                             for m, v in self.verify.items()} or {1: PRIOR_STEP_S})
        cost = curve.cost(n)
        assert cost is not None  # the curve has a size at least
        return cost

    def step_s(self) -> float:
        """One target step: measured; else what a measured batch size and the known `shape`
        make of it (a fixed policy may never run a plain step); else the prior."""
        if 1 in self.verify:
            return self.verify[1]
        within = [m for m in self.verify if m <= len(self.shape)]
        if within:
            return self.verify[min(within)] / self.shape[min(within) - 1]
        return PRIOR_STEP_S

    def batch_for(self, n: int) -> int:
        """The batch that verifies n tokens cheapest: n, or up to `PAD_MAX` more where a larger
        batch is known to cost less (the engine pads, and drops the padding's rows and cache
        entries). A plain step (n = 1) is never padded."""
        if n <= 1:
            return n
        own = self.verify_s(n)
        sizes = [m for m in range(n + 1, n + PAD_MAX + 1)
                 if m in self.verify or m <= len(self.shape)]
        best = min(sizes, key=self.verify_s, default=n)
        return best if self.verify_s(best) < own * PAD_MARGIN else n

    def check_s(self, n: int) -> float:
        """Seconds to verify n tokens, padded as `batch_for` pads them."""
        return self.verify_s(self.batch_for(n))

    def round_s(self, source: str, length: int, uses_passes: bool, behind: int) -> float:
        """Seconds of a round that drafts `length` tokens and verifies them with the token
        before them (`draft_s`, then `check_s`)."""
        return self.draft_s(source, length, uses_passes, behind) + self.check_s(length + 1)

    def draft_s(self, source: str, length: int, uses_passes: bool, behind: int = 1) -> float:
        """Seconds to draft `length` tokens: for a model, one pass that catches up on the
        `behind` committed tokens it has not seen, then a pass per further token; for a lookup
        drafter, one lookup."""
        known = self.pass_time(source)
        if not uses_passes:
            return known or 0.0
        step = known if known is not None else PRIOR_PASS_FRACTION * self.verify_s(1)
        catchup = self.catchup_token_s.get(source, step / 4) * max(0, behind - 1)
        return catchup + step * max(1, length)
