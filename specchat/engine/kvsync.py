"""Keep a backend's KV cache a prefix of the committed sequence.

Both models follow one rule: the cache holds the longest common prefix of what it held and the
committed tokens, and always leaves at least the last committed token to evaluate (its logits
predict the next token). This one rule serves a new round, a new chat turn (only the new tokens
are evaluated), a draft model swapped in mid-conversation (it catches up), and the clean-up after
a rejection or a cancelled turn.
"""

from __future__ import annotations

from collections.abc import Sequence

from specchat.engine.backend import Backend


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    i = 0
    while a[i] == b[i]:
        i += 1
    return i


def release(backend: Backend, committed: Sequence[int]) -> None:
    """Drop every cached token that is not part of `committed` (rejected drafts included)."""
    backend.truncate(common_prefix(backend.tokens, committed))


def read(backend: Backend, ids: Sequence[int]) -> int:
    """Evaluate what the cache lacks of `ids` but the last token (which the next round
    evaluates, as always): a prompt read ahead of its turn, or a draft that sat out rounds
    catching up. Returns how many tokens that was."""
    todo = pending(backend, ids)[:-1] if ids else []
    if todo:
        backend.eval(todo, len(todo) - 1)
    return len(todo)


def pending(backend: Backend, committed: Sequence[int]) -> list[int]:
    """Truncate the cache to what it can keep and return the committed tokens still to evaluate
    (at least one)."""
    keep = min(common_prefix(backend.tokens, committed), len(committed) - 1)
    backend.truncate(keep)
    return list(committed[keep:])
