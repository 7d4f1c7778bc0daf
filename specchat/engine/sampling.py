"""Sampling settings and the transforms that turn a logits row into a distribution.

Draft and target go through the same `distribution()` so the p/q rejection rule compares like
with like (the rule is exact only when both distributions are taken after the same transforms).
Order as in Hugging Face: temperature, then top-k, then top-p.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specchat.engine.types import RowSummary

_NUCLEUS_CANDIDATES = 1024


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    """0 means greedy (argmax)."""
    top_k: int = 0
    """0 turns top-k off."""
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def distribution(self, logits: np.ndarray) -> np.ndarray:
        """Probabilities over the whole vocabulary after temperature, top-k and top-p.

        In greedy mode this is the plain softmax (temperature 1): what `p` and `q` report there.
        """
        x = logits.astype(np.float64)
        if not self.greedy:
            x /= self.temperature
            if 0 < self.top_k < x.size:
                kth = np.partition(x, -self.top_k)[-self.top_k]
                x[x < kth] = -np.inf
        x -= x.max()
        probs = np.exp(x)
        probs /= probs.sum()
        if not self.greedy and self.top_p < 1.0:
            probs = _nucleus(probs, self.top_p)
        return probs


def _nucleus(probs: np.ndarray, top_p: float) -> np.ndarray:
    """Keep the smallest set of most likely tokens whose mass reaches top_p, renormalised."""
    n = min(_NUCLEUS_CANDIDATES, probs.size)
    cand = np.argpartition(probs, -n)[-n:] if n < probs.size else np.arange(probs.size)
    if probs[cand].sum() < top_p:  # the nucleus is wider than the candidates: sort everything
        cand = np.arange(probs.size)
    order = cand[np.argsort(-probs[cand], kind="stable")]
    cum = np.cumsum(probs[order])
    keep = order[: int(np.searchsorted(cum, top_p)) + 1]
    out = np.zeros_like(probs)
    out[keep] = probs[keep]
    return out / out.sum()


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from `probs` (which need not be normalised)."""
    cum = np.cumsum(probs)
    return int(min(np.searchsorted(cum, rng.random() * cum[-1], side="right"), probs.size - 1))


def row_summary(row: np.ndarray) -> RowSummary:
    """Argmax, top-1 minus top-2 logit and log-sum-exp of one logits row, in two cheap passes."""
    top = int(row.argmax())
    best = float(row[top])
    row[top] = -np.inf
    second = float(row.max()) if row.size > 1 else best
    row[top] = best
    lse = best + float(np.log(np.exp(row - best, dtype=np.float32).sum(dtype=np.float64)))
    return RowSummary(top, best - second, lse)
