"""A draft model with another vocabulary drafts as text (Universal Assisted Generation's idea):
the conversation so far, in the target's tokens, is decoded to text and encoded in the draft's
tokens; the draft continues it; its continuation is decoded to text and encoded in the target's
tokens, which the target verifies as usual.

The proposal is a point mass (q = 1, like an n-gram match): greedy verification keeps the
target's own argmax, and the p/q rule with a point mass keeps sampling exact, whatever the
draft's vocabulary. The draft's KV cache follows the re-encoded conversation: only the suffix
whose draft tokens changed is evaluated again. Two boundaries are handled: a conversation that
ends inside a UTF-8 character (the draft is not asked: nothing it writes can be joined to half
a character), and a continuation that ends inside one, or writes bytes that are not UTF-8 (cut
before them).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from specchat.engine import kvsync
from specchat.engine.backend import Backend
from specchat.engine.draft_model import DraftModel
from specchat.engine.sampling import SamplingParams, row_summary, sample
from specchat.engine.types import Draft, Plan

ROUND_TRIP = "Hello, world! def f(x):\n    return x * 2  # ÄÖÜ é 日本語 🙂\n"
"""A text both tokenizers must encode and decode unchanged for drafting as text to work."""


def incomplete_tail(data: bytes) -> int:
    """How many bytes at the end of `data` begin a UTF-8 character they do not finish."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII): does its character fit?
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 6 else 3 if byte >> 4 == 14 else 4
            return back if need > back else 0
    return 0


def valid_text(data: bytes) -> str:
    """The longest start of `data` that is whole UTF-8 characters (a continuation is cut where
    a character is cut, or where the bytes stop being UTF-8)."""
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        return data[:exc.start].decode()


def encode(model: Backend, text: str) -> list[int]:
    """`text` in the model's tokens, without the start-of-sequence token it adds."""
    start = model.tokenize("", special=False)
    ids = model.tokenize(text, special=False)
    return ids[len(start):] if ids[:len(start)] == start else ids


def decode(model: Backend, ids: Sequence[int]) -> bytes:
    return b"".join(model.token_bytes(t) for t in ids)


def round_trips(model: Backend, text: str = ROUND_TRIP) -> bool:
    """Whether the model's tokenizer gives `text` back unchanged."""
    return decode(model, encode(model, text)) == text.encode()


class TextDrafter(DraftModel):
    """`backend` drafts for `target` (whose tokenizer it borrows, never its cache) as text."""

    def __init__(self, backend: Backend, target: Backend, sampling: SamplingParams,
                 rng: np.random.Generator) -> None:
        super().__init__(backend, sampling, rng)
        self.target = target
        self.name = f"{backend.name} (as text)"
        self._committed: list[int] = []
        self._text = b""
        self.encode_s = 0.0
        """Seconds spent re-encoding (both directions) so far."""

    def release(self, committed: Sequence[int]) -> None:
        pass  # the next proposal re-encodes the conversation and keeps the common prefix

    def conversation(self, committed: Sequence[int]) -> bytes:
        """The committed tokens as text, decoded incrementally."""
        keep = kvsync.common_prefix(self._committed, committed)
        if keep < len(self._committed):
            self._text = decode(self.target, committed[:keep])
        self._text += decode(self.target, committed[keep:])
        self._committed = list(committed)
        return self._text

    def propose(self, committed: Sequence[int], plan: Plan) -> Draft:
        t0 = time.perf_counter()
        text = self.conversation(committed)
        if incomplete_tail(text):
            return Draft()  # the target is inside a character: nothing can be joined to it
        # bytes that are not UTF-8 (a model may write them) reach the draft as U+FFFD: its
        # context is only a hint, and the same prefix always reads the same
        ids = self.backend.tokenize(text.decode(errors="replace"), special=True)
        self.encode_s += time.perf_counter() - t0
        todo = kvsync.pending(self.backend, ids)
        draft = Draft(source=self.name, uses_passes=True, behind=len(todo))
        k = min(plan.k(self.name, True, len(todo)), self.backend.n_ctx - len(ids))
        if k <= 0:
            return draft
        t1 = time.perf_counter()
        row = self.backend.eval(todo, len(todo) - 1)[0]
        draft.catchup_s = time.perf_counter() - t1
        written: list[int] = []
        for i in range(k):
            if self.sampling.greedy:
                tok, _, lse = row_summary(row)
                top = float(np.exp(row[tok] - lse))
            else:
                probs = self.sampling.distribution(row)
                tok, top = sample(probs, self.rng), float(probs.max())
            if not plan.keep(self.name, i, top) or self.backend.is_eog(tok):
                break
            written.append(tok)
            draft.conf.append(top)
            if i + 1 < k:
                row = self.backend.eval([tok], 0)[0]
        t2 = time.perf_counter()
        more = valid_text(decode(self.backend, written))
        tokens = encode(self.target, more) if more else []
        self.encode_s += time.perf_counter() - t2
        draft.tokens = tokens[:k]
        draft.q = [1.0] * len(draft.tokens)
        confs = draft.conf  # the draft's confidence of its i-th token, for the i-th target one
        draft.conf = [confs[min(i, len(confs) - 1)] for i in range(len(draft.tokens))]
        return draft
