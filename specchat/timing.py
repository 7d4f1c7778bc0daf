"""Timing the models themselves: the target's verify curve (n tokens at once, interleaved and
repeated) and one draft pass, at the depth their caches hold. specchat.costs turns the times into
what speculation buys."""

from __future__ import annotations

import functools
import random
import statistics
import time
from collections.abc import Callable, Sequence

from specchat.engine import kvsync
from specchat.engine.backend import Backend
from specchat.engine.sampling import row_summary

SIZES = range(1, 17)
COST_REPEATS = 5
"""Timings per size for the costs screen: enough that each size's spread can be shown."""


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


def verify_times(target: Backend, repeats: int, sizes: Sequence[int] = SIZES,
                 seed: int = 0) -> list[list[float]]:
    """Milliseconds for the target to evaluate n tokens at once, with the logits row of each
    (what verification asks for), at the depth its cache holds: `repeats` times per size, each
    repeat visiting the sizes in a new shuffled order, so a slow moment of the machine spreads
    over every size instead of bending one stretch of the curve. The cache is left as it was."""
    base = len(target.tokens)
    if base == 0:
        raise ValueError("the target's cache is empty: evaluate a prompt first")
    tokens = (target.tokens * max(sizes))[-max(sizes):]
    run = functools.partial(_timed_eval, target, base)
    for n in sizes:  # warm every batch size (kernels, graphs) before timing any
        run(tokens[:n])
    times: dict[int, list[float]] = {n: [] for n in sizes}
    order, rng = list(sizes), random.Random(seed)
    for _ in range(repeats):
        rng.shuffle(order)
        for n in order:
            times[n].append(median_ms(functools.partial(run, tokens[:n]), 1))
    target.truncate(base)
    return [times[n] for n in sizes]


def verify_ms(target: Backend, repeats: int, sizes: Sequence[int] = SIZES) -> list[float]:
    """The median of `verify_times` for each size."""
    return [statistics.median(t) for t in verify_times(target, repeats, sizes)]


def spread(times: Sequence[float]) -> float:
    """The interquartile range of repeated timings: how far apart the middle half lies."""
    if len(times) < 2:
        return 0.0
    q = statistics.quantiles(times, n=4, method="inclusive")
    return q[2] - q[0]


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
