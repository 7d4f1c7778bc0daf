"""Where each n-gram of a conversation last started: what the n-gram drafter proposes from, and
what a draft pass guesses its next tokens from (engine/guessed_rows.py)."""

from __future__ import annotations

from collections.abc import Sequence


class NgramIndex:
    """Maps each n-gram (n from `n` to `n_max`) of the indexed tokens that has a token after it
    to where it last started. It grows as tokens are committed, so a lookup costs O(n_max - n)
    however long the conversation is."""

    def __init__(self, n: int, n_max: int) -> None:
        self.n, self.n_max = n, max(n, n_max)
        self._seen: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}
        self._before: dict[tuple[int, ...], int] = {}
        """Where each n-gram started the time before its latest (a draft tree's branch)."""

    def update(self, committed: Sequence[int]) -> None:
        """Index `committed` (indexed again from scratch where it does not extend what was)."""
        if len(committed) < len(self._seen) or committed[: len(self._seen)] != self._seen:
            self._seen, self._index, self._before = [], {}, {}
        start = max(0, len(self._seen) - self.n_max)
        self._seen = list(committed)
        seq = self._seen
        for i in range(start, len(seq)):  # n-grams with a token after them
            for m in range(self.n, min(self.n_max, len(seq) - 1 - i) + 1):
                key = tuple(seq[i : i + m])
                if (last := self._index.get(key)) is not None and last != i:
                    self._before[key] = last
                self._index[key] = i

    def match(self, seq: Sequence[int]) -> tuple[int, int]:
        """Where the indexed tokens that followed the latest earlier occurrence of `seq`'s
        longest suffix (from `n_max` tokens down to `n`) begin, and that suffix's length;
        (0, 0) where none occurred. The longest match picks the right copy where short ones
        are ambiguous (every `return` line of a module starts alike)."""
        for m in range(min(self.n_max, len(seq) - 1), self.n - 1, -1):
            at = self._index.get(tuple(seq[-m:]))
            if at is not None:
                return at + m, m
        return 0, 0

    def earlier(self, seq: Sequence[int], m: int) -> int | None:
        """Where the indexed tokens that followed the occurrence before the latest of `seq`'s
        last m tokens begin (None: it occurred once)."""
        at = self._before.get(tuple(seq[-m:]))
        return None if at is None else at + m

    def after(self, start: int, width: int) -> list[int]:
        """Up to `width` indexed tokens from `start` (a `match`)."""
        return self._seen[start : start + width]
