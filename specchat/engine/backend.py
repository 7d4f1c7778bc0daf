"""The interface between one model and the engine, defined by the engine (specchat/backends
implements it for each runtime), so the engine imports no backend.

A backend owns one model and its KV cache. It mirrors the cache as `tokens` (the ids whose
keys/values the cache holds, in order), so the engine can reason about cache contents without
asking the runtime, and tests can check that the cache holds exactly the accepted tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np


class Backend(Protocol):
    name: str
    """Human name of the model (file stem), used in messages."""
    path: Path
    """The model file or checkpoint folder it was loaded from."""
    n_ctx: int
    n_vocab: int
    tokens: list[int]
    """Token ids the KV cache holds, positions 0..len-1."""
    passes: int
    """Forward passes run so far (one per `eval` call)."""
    can_truncate: bool
    """Whether the cache can drop a suffix (speculation needs it after every rejection)."""
    can_tree: bool
    """Whether `eval_tree` verifies a draft tree in one pass (else the engine drafts chains)."""

    @property
    def where(self) -> str:
        """Where the model runs, in words (`here`, `cuda`, `RPC 10.0.0.2:50052`)."""
        ...

    @property
    def local(self) -> bool:
        """Whether its passes run in this process on this machine, so that this process's CPU
        time is theirs (False for a model driven from a child process or on RPC servers)."""
        ...

    def tokenize(self, text: str, *, special: bool = True) -> list[int]: ...

    def token_bytes(self, token: int) -> bytes: ...

    def is_eog(self, token: int) -> bool: ...

    def eval(self, tokens: Sequence[int], logits_from: int) -> np.ndarray:
        """Append `tokens` to the cache in one forward pass; return the logits rows for
        positions `logits_from`..len(tokens)-1 of this batch as a float32 array."""
        ...

    def eval_tree(self, tokens: Sequence[int], nodes: Sequence[int],
                  parents: Sequence[int]) -> np.ndarray:
        """Append `tokens` (committed, at least one) and a draft tree in one forward pass, each
        node attending to the cache, `tokens` and its ancestors only (`parents[i]`: node i's
        parent, -1 for the last of `tokens`, parents before children); return len(nodes) + 1
        logits rows: after the last of `tokens`, then after each node. Until `keep_path`, the
        cache holds the tree; `tokens` mirrors the first root-to-leaf path."""
        ...

    def keep_path(self, path: Sequence[int]) -> None:
        """After `eval_tree`: keep the nodes `path` (root to deepest), or a prefix of them,
        after the committed tokens, and drop the rest of the tree (the engine evaluates what
        the cache lacks in its next pass, as after any round)."""
        ...

    def fit_threads(self, free: int) -> int:
        """Use at most `free` CPU threads from the next pass on, where the user left the count
        to specchat (never more than it started with); return the threads it now uses."""
        ...

    def truncate(self, n: int) -> None:
        """Drop every cached token at position >= n."""
        ...

    def render_chat(self, messages: Sequence[tuple[str, str]]) -> str:
        """The prompt text for a conversation of (role, content), ending with the assistant
        turn opened."""
        ...

    def close(self) -> None: ...


def user_turn(model: Backend, text: str) -> list[int]:
    """The prompt ids of a conversation of one user message, the assistant's turn opened."""
    return model.tokenize(model.render_chat([("user", text)]))
