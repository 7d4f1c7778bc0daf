"""Guessed rows: a draft pass that also reads what the conversation suggests comes next.

Where the CPU kernels take rows four at a time (Q4_0 on x86), the 0.5B draft reads 4 tokens in
about 1.5 of its one-token passes and 2 tokens in 1.7 (`specchat models optimize` times the
draft's curve). So a pass over the next token can also read the tokens an n-gram match of the
conversation says follow it: the row after each guessed token is the draft's own row for the
next position wherever the draft then proposes what was guessed (it was computed over the same
tokens), and the pass that would have computed it is saved. A wrong guess costs its share of
the wider pass; its cache entries are cut back before the next one. Lossless by construction:
every token is still the draft's own choice from its own row, and the target checks it.
"""

from __future__ import annotations

from collections.abc import Sequence

from specchat.engine.ngram_index import NgramIndex

_WIDEN_MAX = 3
"""A pass is widened by at most 3 tokens (to a batch of 4 after one token: 4 rows are what the
x86 Q4_0 kernels take at once)."""
_FREE_MARGIN = 0.95
"""A wider batch counts as free where it costs at least 5% less than the pass's own (a noisy
timing should not widen a pass on a flat curve)."""
_GUESS_MIN, _GUESS_WORTH = 2, 0.6
"""A match of at least 2 tokens is worth widening a pass by up to 0.6 of a one-token pass: over
the suite's replies (the 0.5B draft, k=3; docs/lab/2026-12-03-draft-passes-that-read-guessed-tokens.md) the draft's next
tokens were such a match's guesses often enough to save 1.2-1.9 passes a guessed round where
the text repeats (edits, the long prose that restates itself, one code prompt) and 0.2-0.6
on the rest; a 1-token match's guesses saved 0-0.5 on all but three prompts."""


class GuessedRows:
    """Chooses what a draft pass reads beyond the tokens it must: guesses, or padding."""

    def __init__(self, steps: Sequence[float]) -> None:
        self.steps = tuple(steps)
        """The draft's pass over n tokens in one-token passes (n = 1, 2, ...), timed by
        `specchat models optimize` on this machine and build; empty: never widen."""
        self.index = NgramIndex(1, 12)

    def follow(self, committed: Sequence[int]) -> None:
        """Index the committed tokens before a proposal (nothing to do where no pass widens)."""
        if self.steps:
            self.index.update(committed)

    def _cost(self, n: int) -> float:
        return self.steps[n - 1]

    def extra(self, seq: Sequence[int], feed: int, useful: int) -> list[int]:
        """Tokens to append to a pass reading the last `feed` tokens of `seq` (the committed
        tokens and the draft so far), where `useful` more rows could serve this round: the
        continuation of `seq`'s longest earlier match, filled up with its last token, to the
        cheapest batch of at most `_WIDEN_MAX` more tokens that is free or, with a match of
        `_GUESS_MIN` tokens, costing at most `_GUESS_WORTH` of a pass more (of batches that
        cost about as much, the widest); none where neither is."""
        if not self.steps or feed > len(self.steps):
            return []
        start, matched = self.index.match(seq) if useful else (0, 0)
        guess = self.index.after(start, _WIDEN_MAX) if matched else []
        own = self._cost(feed)
        bound = own * _FREE_MARGIN
        if matched >= _GUESS_MIN:
            bound = max(bound, own + self._cost(1) * _GUESS_WORTH)
        sizes = [m for m in range(feed + 1, min(feed + _WIDEN_MAX, len(self.steps)) + 1)
                 if self._cost(m) <= bound]
        if not sizes:
            return []
        cheapest = min(self._cost(m) for m in sizes)
        width = max(m for m in sizes if self._cost(m) * _FREE_MARGIN <= cheapest) - feed
        pad = guess[:width]
        return pad + [pad[-1] if pad else seq[-1]] * (width - len(pad))
