"""Consumers of the event stream for a plain terminal: coloured text and JSON lines. What they
say about a turn comes from specchat.wording.

The colours here are the terminal defaults; the TUI takes its colours from theme variables.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import IO

from rich.console import Console
from rich.text import Text

from specchat.engine.events import ContextEvent, Event, RoundEvent, TokenEvent, TokenKind, TurnEvent
from specchat.wording import context_note, shown_text, stats_line

STYLES: dict[TokenKind, str] = {
    TokenKind.ACCEPTED: "green",
    TokenKind.REJECTED: "red strike",
    TokenKind.CORRECTED: "yellow",
    TokenKind.BONUS: "cyan",
    TokenKind.TARGET: "",
}


class TerminalRenderer:
    """Streams token verdicts as coloured text (plain text when not on a terminal)."""

    def __init__(self, out: Console, err: Console, show_rejected: bool = True) -> None:
        self.out, self.err, self.show_rejected = out, err, show_rejected
        self.k_used: Counter[int] = Counter()

    def __call__(self, event: Event) -> None:
        if isinstance(event, RoundEvent):
            if event.round > 0:
                self.k_used[event.k] += 1
        elif isinstance(event, TokenEvent):
            if event.kind is TokenKind.REJECTED and not (self.show_rejected and self.out.is_terminal):
                return
            self.out.print(Text(shown_text(event), STYLES[event.kind]), end="", soft_wrap=True)
        elif isinstance(event, TurnEvent):
            self.out.print()
            self.err.print(stats_line(event, self.k_used), style="dim", highlight=False)
            self.k_used = Counter()
        elif isinstance(event, ContextEvent):
            if event.during_reply:
                self.out.print()
            self.err.print(f"[{context_note(event)}]", style="dim", highlight=False,
                           markup=False)  # the brackets are text, not a style tag


class JsonRenderer:
    """One JSON object per line for every event; the turn object last."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def __call__(self, event: Event) -> None:
        self.stream.write(json.dumps(event.to_json(), ensure_ascii=False) + "\n")
        self.stream.flush()
