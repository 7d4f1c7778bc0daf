"""Prompt lookup: the n-gram drafter, which drafts what followed the conversation's latest
earlier occurrence of its last few tokens (engine/ngram_index.py keeps the index)."""

from __future__ import annotations

from collections.abc import Sequence

from specchat.engine.drafters import NoModel
from specchat.engine.ngram_index import NgramIndex
from specchat.engine.types import Branch, Draft, Plan


class NgramDrafter(NoModel):
    """Prompt lookup: propose what followed the latest earlier occurrence of the longest suffix
    of the conversation (from `n_max` down to `n` tokens) that occurred before.

    Match lengths are grouped into draft sources (`ngram/3`, `ngram/4+`, `ngram/8+`) so a
    policy learns which pay: a long match in a copy-heavy edit is usually right, a short one in
    new prose usually not.
    """

    GROUPS = (8, 4)
    """Lower bounds of the match-length groups above the shortest."""

    def __init__(self, n: int = 3, n_max: int | None = None) -> None:
        self.index = NgramIndex(n, n_max or n)
        self.n, self.n_max = n, self.index.n_max
        self.name = f"ngram-{n}" if self.n_max == n else f"ngram-{n}..{self.n_max}"

    def source(self, m: int) -> str:
        return next((f"ngram/{g}+" for g in self.GROUPS if self.n < g <= m), f"ngram/{self.n}")

    def propose(self, committed: Sequence[int], plan: Plan) -> Draft:
        self.index.update(committed)
        start, m = self.index.match(committed)
        if not m:
            return Draft()
        source = self.source(m)
        tokens = self.index.after(start, plan.k(source, False))
        draft = Draft(tokens=tokens, q=[1.0] * len(tokens), source=source)
        if plan.width > 1 and tokens:
            self._branch(draft, committed, m, plan)
        return draft

    def _branch(self, draft: Draft, committed: Sequence[int], m: int, plan: Plan) -> None:
        """A draft tree: where the occurrence before the latest went on otherwise, its token
        there beside the chain's (a point mass, as the chain's are), if the plan takes it."""
        start = self.index.earlier(committed, m)
        if start is None:
            return
        other = self.index.after(start, len(draft))
        at = next((i for i, (a, b) in enumerate(zip(draft.tokens, other)) if a != b), None)
        if at is not None and plan.alternatives(draft.source, at, None, [1.0]):
            draft.branches.append(Branch(at, [other[at]], [1.0]))

    def release(self, committed: Sequence[int]) -> None:
        pass  # the index follows `committed` on the next proposal
