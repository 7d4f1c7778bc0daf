"""A llama-server reply, streamed with `timings_per_token`, turned into specchat's event stream.

The server sends every generated token in a chunk of its own, with its cumulative draft
counters (`draft_n`, `draft_n_accepted`) in `timings`. It adds a verify step's counts before it
sends that step's tokens, so the chunk where the counters move opens a step of `accepted + 1`
tokens: the accepted drafts, then the target's own token (a correction when fewer than drafted
were accepted, a bonus when all were). A token whose chunk moves no counter is a plain target
step. Rejected drafts are known by count only: each is a REJECTED token with no text and id -1.
`tokens_predicted` counts the tokens generated so far, so a token the server held back (the
first half of a multi-byte character) is still counted, its text arriving with the next one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from specchat.engine.events import Event, RoundEvent, StopReason, TokenEvent, TokenKind, TurnEvent
from specchat.engine.stats import TurnStats
from specchat.server.client import Chunk

UNKNOWN_ID = -1
"""The id of a token the server did not name (a rejected draft, or a held-back token)."""
STOP_REASONS = {"eos": StopReason.EOS, "word": StopReason.STOP_STRING,
                "limit": StopReason.MAX_TOKENS}


@dataclass
class _Step:
    """A verify step in flight: its counts and the tokens that have arrived for it."""

    drafted: int
    accepted: int
    tokens: list[tuple[int, str]] = field(default_factory=list)

    @property
    def size(self) -> int:
        return self.accepted + 1


@dataclass
class ServerReply:
    """Turns the chunks of one reply into events; `events` yields them as they are due."""

    draft: str
    t0: float = field(default_factory=time.perf_counter)
    stats: TurnStats = field(default_factory=TurnStats)
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    counters: tuple[int, int] = (0, 0)
    generated: int = 0
    step: _Step | None = None
    last_t: float = 0.0
    k_max: int = 0
    final: dict[str, float] = field(default_factory=dict)
    stop_reason: StopReason = StopReason.CANCELLED

    def events(self, chunks: Iterable[Chunk], cancel: threading.Event | None = None,
               ) -> Iterator[Event]:
        """Every token and one RoundEvent per server step (the caller makes the TurnEvent with
        `turn`). Setting `cancel` ends the reply after the chunk in hand (the caller's generator
        closes the stream, which stops the server)."""
        for chunk in chunks:
            yield from self.take(chunk)
            if chunk.stop:
                self.final = dict(chunk.timings)
                self.stop_reason = STOP_REASONS.get(chunk.stop_type, StopReason.EOS)
                break
            if cancel is not None and cancel.is_set():
                break
        yield from self.close()

    def take(self, chunk: Chunk) -> Iterator[Event]:
        n = chunk.tokens_predicted
        if n <= self.generated:  # no new token (prompt progress, the final summary)
            return
        now = time.perf_counter() - self.t0
        ids = chunk.tokens
        pieces = [(UNKNOWN_ID, "")] * (n - self.generated - 1) + [
            (ids[-1] if ids else UNKNOWN_ID, chunk.content)]
        self.generated = n
        counters = (chunk.draft_n, chunk.draft_n_accepted)
        if counters != self.counters:
            # a token held back (half a character) finishes the step before: the chunk's last
            # token is the new step's, whose counts the server added before sending it
            step = self.step
            owed = step.size - len(step.tokens) if step is not None else 0
            for piece in pieces[:min(owed, len(pieces) - 1)]:
                yield from self.add(piece, now)
            pieces = pieces[min(owed, len(pieces) - 1):]
            yield from self.close(now)
            drafted, accepted = (c - p for c, p in zip(counters, self.counters))
            self.counters = counters
            self.step = _Step(drafted, accepted)
            self.k_max = max(self.k_max, drafted)
        for piece in pieces:
            yield from self.add(piece, now)

    def add(self, piece: tuple[int, str], now: float) -> Iterator[Event]:
        """One token into the step in flight (a plain target step when none is open)."""
        if self.step is None:
            self.step = _Step(0, 0)
        self.step.tokens.append(piece)
        if len(self.step.tokens) == self.step.size:
            yield from self.close(now)

    def close(self, now: float | None = None) -> Iterator[Event]:
        """The events of the step in flight (a step cut short ends with what arrived)."""
        step, self.step = self.step, None
        if step is None or not step.tokens:
            return
        now = time.perf_counter() - self.t0 if now is None else now
        n_round = self.stats.rounds
        for i, (token, text) in enumerate(step.tokens):
            if i < step.accepted:
                kind = TokenKind.ACCEPTED
            elif not step.drafted:
                kind = TokenKind.TARGET
            else:
                kind = TokenKind.BONUS if step.accepted == step.drafted else TokenKind.CORRECTED
                for _ in range(step.drafted - step.accepted):
                    yield TokenEvent(kind=TokenKind.REJECTED, id=UNKNOWN_ID, text="",
                                     position=len(self.token_ids), round=n_round, p=None, q=None,
                                     logit_gap=None)
            yield TokenEvent(kind=kind, id=token, text=text, position=len(self.token_ids),
                             round=n_round, p=None, q=None, logit_gap=None)
            self.token_ids.append(token)
            self.text += text
        event = RoundEvent(n_round, step.drafted, step.drafted, step.accepted, 0.0,
                           now - self.last_t, len(step.tokens), now, "server")
        self.last_t = now
        self.stats.add_round(event)
        yield event

    def turn(self, prompt_ids: list[int], baseline: tuple[float, str] | None = None,
             typed_ahead: tuple[int, float] = (0, 0.0)) -> TurnEvent:
        """The turn summary, its numbers from this side's clock as the tokens arrived, with the
        server's final timings; `baseline`: the target-only rate (0: not measured) and how it
        was measured, on the same clock; `typed_ahead`: the server's reads of the prompt while
        it was typed that it kept (tokens, seconds by its own timings)."""
        rate, how = baseline or (0.0, "not measured")
        event = self.stats.turn_event(
            text=self.text, token_ids=self.token_ids, prompt_ids=prompt_ids,
            wall_s=time.perf_counter() - self.t0, target_passes=self.stats.rounds,
            draft_passes=self.stats.drafted, draft=self.draft, k=self.k_max,
            policy="llama-server", stop_reason=self.stop_reason, baseline=rate or None,
            baseline_source=how, typed_ahead=typed_ahead)
        return (replace(event, diagnostics=replace(event.diagnostics, server=self.final))
                if self.final else event)
