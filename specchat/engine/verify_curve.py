"""What verifying n tokens at once costs the target, from the batch sizes that were timed: one
rule for the sizes that were not, which the live policy, the costs screen (F7), `tune` and every
prediction share, so that they never price the same batch two ways.

Between two timed sizes, the straight line between them; beyond the largest, its cost plus the
least-squares slope of all timed sizes per token (never negative: a larger batch does not cost
less than the largest timed); with one timed size, the prior slope.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PRIOR_BATCH_SLOPE = 0.35
"""Before two batch sizes are timed: verifying n tokens costs V(1)(1 + 0.35 (n - 1)), a prior
between a GPU's flat curve and a CPU's steep one (the curves measured are in docs/lab/
and docs/gpu.md); the timings replace it within a few rounds."""


@dataclass(frozen=True)
class VerifyCurve:
    timed: Mapping[int, float]
    """Batch size -> its cost (seconds or milliseconds: the curve keeps the unit)."""

    @classmethod
    def from_sizes(cls, costs: tuple[float, ...] | list[float]) -> VerifyCurve:
        """Costs of n = 1, 2, ... tokens in order."""
        return cls({n: c for n, c in enumerate(costs, 1)})

    def cost(self, n: int) -> float | None:
        """The cost of verifying `n` tokens: timed, or by the one rule; None where nothing was
        timed."""
        if n in self.timed:
            return self.timed[n]
        points = sorted(self.timed.items())
        if not points:
            return None
        below = [p for p in points if p[0] < n]
        above = [p for p in points if p[0] > n]
        if below and above:
            (n0, c0), (n1, c1) = below[-1], above[0]
            return c0 + (c1 - c0) * (n - n0) / (n1 - n0)
        if below and len(points) >= 2:
            xs = [p[0] for p in points]
            mx, my = sum(xs) / len(xs), sum(c for _, c in points) / len(points)
            slope = (sum((x - mx) * (c - my) for x, c in points)
                     / sum((x - mx) ** 2 for x in xs))
            return below[-1][1] + max(slope, 0.0) * (n - below[-1][0])
        n0, c0 = below[-1] if below else above[0]
        return c0 * (1 + PRIOR_BATCH_SLOPE * (n - 1)) / (1 + PRIOR_BATCH_SLOPE * (n0 - 1))
