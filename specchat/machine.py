"""What speculation costs on this machine and what it buys: timed on the models themselves, and
the arithmetic that turns those costs and an acceptance into an expected speedup.

A round that drafts k tokens costs k draft passes and one verify of k+1 tokens; it yields the
expected-accepted-length number of tokens (`engine.policy.expected_tokens`). Against a
target-only step both are counted in steps, so the speedup is
`expected_tokens(accept[:k]) / (verify(k+1) + k * draft)`. On a CPU verify(n) grows almost
linearly with n and that is why speculation loses there; on a GPU it stays near one step.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from specchat.engine import kvsync
from specchat.engine.backend import Backend
from specchat.engine.policy import expected_tokens
from specchat.engine.sampling import row_summary

SIZES = range(1, 17)
FLAT_SLOPE = 0.02
"""A GPU's verify curve for the what-if: n tokens cost 1 + 0.02 (n - 1) steps, so a batch of 8
costs about one step (an H200 measured 1.25 for 8 through transformers: docs/gpu.md)."""


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _timed_eval(model: Backend, base: int, tokens: list[int]) -> None:
    model.truncate(base)
    for row in model.eval(tokens, 0):
        row_summary(row)


def verify_ms(target: Backend, repeats: int, sizes: Sequence[int] = SIZES) -> list[float]:
    """Milliseconds for the target to evaluate n tokens at once, with the logits row of each
    (what verification asks for), at the depth its cache holds; the cache is left as it was."""
    base = len(target.tokens)
    if base == 0:
        raise ValueError("the target's cache is empty: evaluate a prompt first")
    tokens = (target.tokens * max(sizes))[-max(sizes):]
    run = functools.partial(_timed_eval, target, base)
    for n in sizes:  # warm every batch size (kernels, graphs) before timing any
        run(tokens[:n])
    out = [median_ms(functools.partial(run, tokens[:n]), repeats) for n in sizes]
    target.truncate(base)
    return out


def draft_pass_ms(draft: Backend, repeats: int) -> float:
    """One draft pass (one token, one logits row) at the depth the draft's cache holds."""
    base = len(draft.tokens)
    run = functools.partial(_timed_eval, draft, base, draft.tokens[-1:] or [0])
    run()
    out = median_ms(run, repeats)
    draft.truncate(base)
    return out


def draft_pass_after(draft: Backend, committed: Sequence[int], repeats: int) -> float:
    """One draft pass after the draft has caught up on `committed` (as its next proposal
    would); its cache then holds `committed`."""
    todo = kvsync.pending(draft, committed)
    draft.eval(todo, len(todo) - 1)
    return draft_pass_ms(draft, repeats)


@dataclass(frozen=True)
class Costs:
    verify: tuple[float, ...]
    """Milliseconds to verify n = 1, 2, ... tokens."""
    draft: float
    """Milliseconds of one draft pass (0 for a drafter with no model: n-gram lookup)."""
    depth: int = 0
    """The context depth they were timed at."""

    def steps(self, n: int) -> float:
        """Verifying n tokens, in target-only steps (extrapolated past the measured sizes)."""
        v = self.verify
        if n <= len(v):
            return v[n - 1] / v[0]
        slope = (v[-1] - v[-2]) / v[0] if len(v) > 1 else 1.0
        return v[-1] / v[0] + slope * (n - len(v))

    @property
    def draft_steps(self) -> float:
        return self.draft / self.verify[0]

    def flat(self) -> Costs:
        """The same step and draft pass with a GPU's flat verify curve."""
        return replace(self, verify=tuple(self.verify[0] * (1 + FLAT_SLOPE * i)
                                          for i in range(len(self.verify))))

    def free_drafter(self) -> Costs:
        return replace(self, draft=0.0)


def speedup(costs: Costs, accept: Sequence[float], k: int) -> float:
    """Expected tokens of a k-token round over its cost in target steps; `accept[i]` is the
    chance draft token i stands given the ones before it stood."""
    if k == 0:
        return 1.0
    return expected_tokens(list(accept[:k])) / (costs.steps(k + 1) + k * costs.draft_steps)


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
