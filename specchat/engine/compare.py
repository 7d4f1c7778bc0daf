"""Comparing a speculative greedy run with a target-only one, and why they may part.

llama.cpp's logits depend on how tokens are batched: the same position evaluated alone or inside
a verify batch rounds differently. A greedy speculative run may therefore take the other token
of a near-tie. These helpers measure how far batching moves the top-1/top-2 logit gap on a
model, and find the first position where two runs part, so tests, docs and users can check that
every divergence is such a near-tie.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from specchat.engine.backend import Backend
from specchat.engine.events import TokenEvent, TurnEvent
from specchat.engine.sampling import row_summary


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token, or None when one run is a prefix of the other."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None


def _top2_gaps(rows: np.ndarray) -> np.ndarray:
    top2 = np.partition(rows, -2, axis=1)[:, -2:]
    return np.abs(top2[:, 1] - top2[:, 0])


def batching_gap_drift(
    backend: Backend, prompt: Sequence[int], continuation: Sequence[int],
    batch_sizes: Iterable[int] = (2, 3, 5, 8),
) -> float:
    """The largest change of the top-2 logit gap at the continuation's positions between
    one-at-a-time evaluation and evaluation in batches of each size. Leaves the cache empty."""
    seq = list(prompt) + list(continuation)
    n0 = len(prompt)

    def rows_in_batches(size: int) -> np.ndarray:
        backend.truncate(0)
        rows = [backend.eval(seq[:n0], n0 - 1)]
        for lo in range(n0, len(seq) - 1, size):
            rows.append(backend.eval(seq[lo:min(lo + size, len(seq) - 1)], 0))
        return np.concatenate(rows)

    single = _top2_gaps(rows_in_batches(1))
    worst = max(float(np.abs(single - _top2_gaps(rows_in_batches(b))).max())
                for b in batch_sizes)
    backend.truncate(0)
    return worst


def divergence(
    target: Backend | None, base: TurnEvent, base_tokens: Sequence[TokenEvent], other: TurnEvent,
    rows: Mapping[int, np.ndarray] | None = None,
) -> tuple[int, float | None] | None:
    """Where `other` first parts from the target-only reply `base`, and the target-only top-2
    logit gap there; None when neither parts from the other. A run that chose end-of-turn where
    the other went on parts there too. The gap is read from `base`'s token events; else from
    `rows` (the target-only run's logits by absolute position); else by evaluating `target`
    directly (this empties its cache); None where none of them has it."""
    at = first_divergence(base.token_ids, other.token_ids)
    if at is None and base.counts.n_tokens != other.counts.n_tokens:
        at = min(base.counts.n_tokens, other.counts.n_tokens)
    if at is None:
        return None
    gap = next((e.logit_gap for e in base_tokens if e.position == at), None)
    row = None if gap is not None or rows is None else rows.get(len(base.prompt_token_ids) + at)
    if row is not None:
        gap = row_summary(row)[1]
    elif gap is None and target is not None:
        ids = base.prompt_token_ids + base.token_ids[:at]
        target.truncate(0)
        gap = row_summary(target.eval(ids, len(ids) - 1)[0])[1]
        target.truncate(0)
    return at, gap
