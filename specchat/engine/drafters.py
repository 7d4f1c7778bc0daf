"""Drafters: whatever proposes the next few tokens for the target to check.

All share one interface so a menu can swap them mid-conversation: `propose(committed, k)`
returns a `Draft`, `release(committed)` forgets what the target refused. A model drafter keeps
its own KV cache in step with the committed tokens; the n-gram drafter keeps an index of the
conversation; `NoDrafter` proposes nothing (target only, the baseline).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from specchat.backends.base import Backend
from specchat.engine import kvsync
from specchat.engine.sampling import SamplingParams, row_summary, sample


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    q: list[float] = field(default_factory=list)
    """The drafter's probability of each proposed token."""
    dists: list[np.ndarray] | None = None
    """Full draft distributions (sampling with a model drafter); None means point masses."""

    def __len__(self) -> int:
        return len(self.tokens)


class Drafter(Protocol):
    name: str
    passes: int
    """Forward passes of a draft model (0 for drafters without one)."""

    def propose(self, committed: Sequence[int], k: int) -> Draft: ...

    def release(self, committed: Sequence[int]) -> None: ...


class NoDrafter:
    """Target only: every round is one plain target step."""

    name = "none"
    passes = 0

    def propose(self, committed: Sequence[int], k: int) -> Draft:
        return Draft()

    def release(self, committed: Sequence[int]) -> None:
        pass


class ModelDrafter:
    """A small model that shares the target's vocabulary proposes up to k tokens.

    Drafting stops early when the draft's top probability falls below `p_min` (the confidence
    stop of llama.cpp's `--draft-p-min`).
    """

    def __init__(
        self,
        backend: Backend,
        sampling: SamplingParams,
        rng: np.random.Generator,
        p_min: float = 0.0,
    ) -> None:
        self.backend = backend
        self.name = backend.name
        self.sampling = sampling
        self.rng = rng
        self.p_min = p_min

    @property
    def passes(self) -> int:
        return self.backend.passes

    def propose(self, committed: Sequence[int], k: int) -> Draft:
        draft = Draft(dists=None if self.sampling.greedy else [])
        k = min(k, self.backend.n_ctx - len(committed))
        if k <= 0:
            return draft
        todo = kvsync.pending(self.backend, committed)
        row = self.backend.eval(todo, len(todo) - 1)[0]
        for i in range(k):
            if draft.dists is None:  # greedy: argmax and its softmax probability, no full copy
                tok, _, lse = row_summary(row)
                q = top = float(np.exp(row[tok] - lse))
            else:
                probs = self.sampling.distribution(row)
                tok = sample(probs, self.rng)
                q, top = float(probs[tok]), float(probs.max())
            if top < self.p_min:
                break
            draft.tokens.append(tok)
            draft.q.append(q)
            if draft.dists is not None:
                draft.dists.append(probs)
            if i + 1 < k:
                row = self.backend.eval([tok], 0)[0]
        return draft

    def release(self, committed: Sequence[int]) -> None:
        kvsync.release(self.backend, committed)


class NgramDrafter:
    """Prompt lookup: propose what followed the latest earlier occurrence of the last n tokens.

    The index maps each n-gram that has a continuation to where it last started, and grows as
    tokens are committed, so a lookup costs O(1) however long the conversation is.
    """

    passes = 0

    def __init__(self, n: int = 3) -> None:
        self.n = n
        self.name = f"ngram-{n}"
        self._seen: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}

    def _update(self, committed: Sequence[int]) -> None:
        if len(committed) < len(self._seen) or committed[: len(self._seen)] != self._seen:
            self._seen, self._index = [], {}
        start = max(0, len(self._seen) - self.n)
        self._seen = list(committed)
        seq = self._seen
        for i in range(start, len(seq) - self.n):  # n-grams with a token after them
            self._index[tuple(seq[i : i + self.n])] = i

    def propose(self, committed: Sequence[int], k: int) -> Draft:
        self._update(committed)
        if k <= 0 or len(committed) <= self.n:
            return Draft()
        at = self._index.get(tuple(committed[-self.n :]))
        if at is None:
            return Draft()
        tokens = list(committed[at + self.n : at + self.n + k])
        return Draft(tokens=tokens, q=[1.0] * len(tokens))

    def release(self, committed: Sequence[int]) -> None:
        pass  # the index follows `committed` on the next proposal
