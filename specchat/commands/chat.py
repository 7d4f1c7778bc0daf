"""`specchat chat`: a line-based chat for plain terminals."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rich.console import Console

from specchat import settings as settings_schema
from specchat.engine.events import Event
from specchat.errors import SpecchatError
from specchat.settings import Settings

if TYPE_CHECKING:
    from specchat.chat.history import HistoryStore


def add_parser(sub: argparse._SubParsersAction, defaults: Settings) -> None:
    chat = sub.add_parser("chat", help="a line-based chat for plain terminals")
    settings_schema.add_arguments(chat, defaults)
    chat.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """A line-based chat in the terminal, saved to the history as it happens (the app's Ctrl+O
    opens it); Ctrl-C stops the reply being generated."""
    from specchat.chat.history import HistoryStore
    from specchat.chat.state import ChatState
    from specchat.chat.worker import in_worker
    from specchat.loading import open_session
    from specchat.render import TerminalRenderer
    from specchat.wording import LEGEND

    out, err = Console(highlight=False), Console(stderr=True)
    settings = settings_schema.from_args(args)
    if settings.models.server:
        err.print(f"asking the llama-server at {settings.models.server} …", style="dim")
    else:
        err.print(f"loading {settings.models.target} with draft {settings.models.draft} …",
                  style="dim")
    session, where = open_session(settings)
    err.print(where, style="dim", highlight=False)
    generation = settings.sampling.generation()
    render = TerminalRenderer(out, err)
    chat = ChatState(session, HistoryStore())
    warned = _warn_history(chat.history, None)
    err.print(LEGEND)
    err.print("Ctrl-C stops a reply, Ctrl-D quits.", style="dim")
    while True:
        try:
            text = out.input("[bold]you>[/] ")
        except (EOFError, KeyboardInterrupt):
            out.print()
            return 0
        if not text.strip():
            continue
        chat.begin(text)

        def turn(cancel: threading.Event, text: str = text) -> Iterator[Event]:
            return chat.turn(text, generation, cancel)

        try:
            for event in in_worker(turn):
                render(event)
                chat.record(event)
        except SpecchatError as exc:  # this turn failed; the conversation goes on
            err.print(f"specchat: error: {exc}", style="red", highlight=False)
        warned = _warn_history(chat.history, warned)


def _warn_history(history: HistoryStore, warned: str | None) -> str | None:
    """Say once (on stderr) that the history is not being saved, and why."""
    if history.problem and history.problem != warned:
        print(f"specchat: warning: {history.problem}", file=sys.stderr)
    return history.problem
