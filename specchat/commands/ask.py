"""`specchat ask PROMPT`: one reply, streamed with its verdict colours and a stats line (or
the event stream as JSON lines), optionally recorded as a trace."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable

from rich.console import Console

from specchat import settings as settings_schema
from specchat.engine.events import Event
from specchat.native import model_thread
from specchat.settings import Settings


def add_parser(sub: argparse._SubParsersAction, defaults: Settings) -> None:
    ask = sub.add_parser("ask", help="one prompt, streamed, with verdict colours and stats")
    ask.add_argument("prompt")
    ask.add_argument("--json", action="store_true", help="one JSON object per event")
    ask.add_argument("--trace", metavar="FILE", help="also record the turn as a trace file")
    settings_schema.add_arguments(ask, defaults)
    ask.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specchat.chat.history import default_history_path
    from specchat.chat.learned import remember
    from specchat.loading import open_session
    from specchat.render import JsonRenderer, TerminalRenderer
    from specchat.wording import trees_refused

    model_thread.adopt()  # every pass on this thread: none handed over
    settings = settings_schema.from_args(args)
    session, where = open_session(settings)
    remember(session, default_history_path())  # from what earlier replies on this target measured
    engine = getattr(session, "engine", None)  # None on a llama-server
    if engine is None or trees_refused(engine) or any(
            not m.local for m in (engine.target, engine.drafter.model) if m):
        print(f"specchat: {where}", file=sys.stderr)
    if args.json:
        sinks: list[Callable[[Event], None]] = [JsonRenderer(sys.stdout)]
    else:
        sinks = [TerminalRenderer(Console(highlight=False), Console(stderr=True))]
    with contextlib.ExitStack() as stack:
        if args.trace:
            from specchat.trace import TraceWriter

            target, draft = session.names()
            meta = {"prompt": args.prompt, "system": settings.sampling.system,
                    "target": target.rsplit("/", 1)[-1].removesuffix(".gguf"), "draft": draft,
                    "settings": settings.saved()}
            sinks.append(TraceWriter(stack.enter_context(open(args.trace, "w", encoding="utf-8")),
                                     meta))
        for event in session.turn(args.prompt, settings.sampling.generation()):
            for sink in sinks:
                sink(event)
    return 0
