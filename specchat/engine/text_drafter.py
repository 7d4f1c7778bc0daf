"""A draft model with another vocabulary drafts for a target: greedy as text (Universal Assisted
Generation's idea), sampling on the tokens both vocabularies share (TLI, Timor et al. 2025).

The conversation so far, in the target's tokens, is decoded to text and encoded in the draft's
tokens, and the draft continues it. Greedy: its continuation is decoded to text and encoded in
the target's tokens, proposed as a point mass (q = 1, like an n-gram match); greedy
verification keeps the target's own argmax whatever the proposal. Sampling: the draft's
distribution is restricted to the tokens whose text is one token of the target's too, and
renormalized; its draws are those target tokens, with that distribution as q, so the p/q rule
keeps the target's distribution and accepts what the draft and target agree on, where a point
mass accepts only p(x) of its draw.

The draft's KV cache follows the re-encoded conversation: only the suffix whose draft tokens
changed is evaluated again. Two boundaries are handled: a conversation that ends inside a UTF-8
character (the draft is not asked: nothing it writes can be joined to half a character), and a
greedy continuation that ends inside one, or writes bytes that are not UTF-8 (cut before them).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from specchat.engine import kvsync
from specchat.engine.backend import Backend
from specchat.engine.draft_model import DraftModel
from specchat.engine.sampling import SamplingParams, row_summary, sample
from specchat.engine.types import Draft, DraftCost, Plan

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


class SharedTokens:
    """The tokens the draft and the target spell the same, non-empty text, one token in each:
    the draft's ids and, at the same index, the target's (its first id of that text)."""

    def __init__(self, draft: Backend, target: Backend) -> None:
        by_text: dict[bytes, int] = {}
        for t in range(target.n_vocab):
            if text := target.token_bytes(t):
                by_text.setdefault(text, t)
        pairs: list[tuple[int, int]] = []
        for d in range(draft.n_vocab):
            if (text := draft.token_bytes(d)) and text in by_text:
                pairs.append((d, by_text.pop(text)))  # popped: a text spelled twice maps once
        self.draft_ids = np.array([d for d, _ in pairs], dtype=np.int64)
        self.target_ids = np.array([t for _, t in pairs], dtype=np.int64)
        self.target_of = dict(pairs)
        self.target_size = target.n_vocab

    def restrict(self, probs: np.ndarray) -> np.ndarray | None:
        """The draft's distribution on the shared tokens, renormalized (None: no mass there)."""
        q = np.zeros_like(probs)
        q[self.draft_ids] = probs[self.draft_ids]
        total = q.sum()
        return q / total if total > 0 else None

    def on_target(self, q: np.ndarray) -> np.ndarray:
        """`q` (on the draft's shared ids) as a distribution on the target's vocabulary."""
        out = np.zeros(self.target_size, dtype=q.dtype)
        out[self.target_ids] = q[self.draft_ids]
        return out


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
        self._shared: SharedTokens | None = None

    def next_row(self, plan: Plan, tok: int, i: int, k: int) -> np.ndarray | None:
        """After keeping draft token i (`tok`): the draft's row for token i + 1, from one pass;
        None where the draft is k tokens long or the plan finds that pass not worth running."""
        if i + 1 == k or not plan.worth_a_pass(self.name, i + 1):
            return None
        return self.backend.eval([tok], 0)[0]

    @property
    def shared(self) -> SharedTokens:
        """The shared tokens, found at the first sampled round (greedy never needs them)."""
        if self._shared is None:
            self._shared = SharedTokens(self.backend, self.target)
        return self._shared

    def release(self, committed: Sequence[int]) -> None:
        pass  # the next proposal re-encodes the conversation and keeps the common prefix

    def read(self, committed: Sequence[int]) -> int:
        """The conversation in the draft's tokens, read but its last (which may change as
        the text goes on)."""
        return kvsync.read(self.backend, self.own_tokens(committed))

    def conversation(self, committed: Sequence[int]) -> bytes:
        """The committed tokens as text, decoded incrementally."""
        keep = kvsync.common_prefix(self._committed, committed)
        if keep < len(self._committed):
            self._text = decode(self.target, committed[:keep])
        self._text += decode(self.target, committed[keep:])
        self._committed = list(committed)
        return self._text

    def own_tokens(self, committed: Sequence[int]) -> list[int]:
        """The committed tokens (the target's) as the draft reads them: their text in its
        tokens. Bytes that are not UTF-8 (a model may write them) reach the draft as U+FFFD:
        its context is only a hint, and the same prefix always reads the same."""
        return self.backend.tokenize(self.conversation(committed).decode(errors="replace"),
                                     special=True)

    def propose(self, committed: Sequence[int], plan: Plan) -> Draft:
        t0 = time.perf_counter()
        if incomplete_tail(self.conversation(committed)):
            return Draft()  # the target is inside a character: nothing can be joined to it
        ids = self.own_tokens(committed)
        self.encode_s += time.perf_counter() - t0
        todo = kvsync.pending(self.backend, ids)
        draft = Draft(source=self.name, uses_passes=True, cost=DraftCost(behind=len(todo)))
        k = min(plan.k(self.name, True, len(todo)), self.backend.n_ctx - len(ids))
        if k <= 0:
            return draft
        t1 = time.perf_counter()
        row = self.backend.eval(todo, len(todo) - 1)[0]
        draft.cost.catchup_s = time.perf_counter() - t1
        if not self.sampling.greedy:
            return self._sample_shared(draft, row, k, plan)
        written: list[int] = []
        for i in range(k):
            tok, _, lse = row_summary(row)
            top = float(np.exp(row[tok] - lse))
            if not plan.keep(self.name, i, top) or self.backend.is_eog(tok):
                break
            written.append(tok)
            draft.conf.append(top)
            if (next_row := self.next_row(plan, tok, i, k)) is None:
                break
            row = next_row
            draft.cost.later_draws += 1
        draft.own_pieces = self._pieces(written)
        t2 = time.perf_counter()
        more = valid_text(decode(self.backend, written))
        tokens = encode(self.target, more) if more else []
        self.encode_s += time.perf_counter() - t2
        draft.tokens = tokens[:k]
        draft.q = [1.0] * len(draft.tokens)
        confs = draft.conf  # the draft's confidence of its i-th token, for the i-th target one
        draft.conf = [confs[min(i, len(confs) - 1)] for i in range(len(draft.tokens))]
        return draft

    def _sample_shared(self, draft: Draft, row: np.ndarray, k: int, plan: Plan) -> Draft:
        """Up to k draws from the draft's distribution restricted to the shared tokens, as
        target tokens with that distribution as q (TLI)."""
        shared = self.shared
        draft.dists = []
        for i in range(k):
            q = shared.restrict(self.sampling.distribution(row))
            if q is None:
                break
            tok = sample(q, self.rng)
            top = float(q.max())
            if not plan.keep(self.name, i, top):
                break
            draft.tokens.append(shared.target_of[tok])
            draft.q.append(float(q[tok]))
            draft.conf.append(top)
            draft.dists.append(shared.on_target(q))
            draft.own_pieces.append(self._pieces([tok])[0])
            if (next_row := self.next_row(plan, tok, i, k)) is None:
                break
            row = next_row
            draft.cost.later_draws += 1
        return draft

    def _pieces(self, tokens: Sequence[int]) -> list[str]:
        """The draft's own tokens as text, each on its own (a cut character reads as U+FFFD)."""
        return [self.backend.token_bytes(t).decode(errors="replace") for t in tokens]
