"""`specchat`: ask, chat, models. User errors print one line and exit 2, never a traceback."""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from specchat import settings as settings_schema
from specchat.engine.events import Event
from specchat.errors import SpecchatError
from specchat.native import model_thread
from specchat.settings import Settings

if TYPE_CHECKING:
    from specchat.chat.history import HistoryStore

EXIT_USAGE = 2


def _settings(args: argparse.Namespace) -> Settings:
    return settings_schema.from_args(args)


def cmd_ask(args: argparse.Namespace) -> int:
    from specchat.loading import open_session
    from specchat.render import JsonRenderer, TerminalRenderer

    model_thread.adopt()  # every pass on this thread: none handed over
    settings = _settings(args)
    session, where = open_session(settings)
    engine = getattr(session, "engine", None)  # None on a llama-server
    if engine is None or any(m.where != "here" for m in (engine.target, engine.drafter.model) if m):
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


def cmd_chat(args: argparse.Namespace) -> int:
    """A line-based chat in the terminal, saved to the history as it happens (the app's Ctrl+O
    opens it); Ctrl-C stops the reply being generated."""
    from specchat.chat.history import HistoryStore
    from specchat.chat.state import ChatState
    from specchat.chat.worker import in_worker
    from specchat.loading import open_session
    from specchat.render import TerminalRenderer
    from specchat.wording import LEGEND

    out, err = Console(highlight=False), Console(stderr=True)
    settings = _settings(args)
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


def cmd_tui(args: argparse.Namespace) -> int:
    from specchat.ui.app import SpecchatApp

    SpecchatApp(_settings(args)).run()
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from specchat.trace import read_trace, shipped_traces
    from specchat.ui.app import SpecchatApp
    from specchat.ui.launch import Launch

    if args.list or not args.files:
        for path in shipped_traces():
            trace = read_trace(path)
            print(f"{path.stem:<28} {trace.meta.get('draft', '?'):<36} {trace.prompt[:60]!r}")
        return 0
    traces = [read_trace(f) for f in args.files]
    if args.export:
        from specchat.ui.export import export

        files = export([(Path(f).name.removesuffix(".jsonl"), t) for f, t in zip(args.files, traces)],
                       args.export, args.out, args.theme)
        print(f"wrote {len(files)} files to {args.out.resolve()}: "
              + ", ".join(f.name for f in files))
        return 0
    if len(traces) == 1:
        launch = Launch(replay=traces[0], replay_speed=args.speed, step=args.step)
    else:
        launch = Launch(race=traces, replay_speed=args.speed)
    SpecchatApp(launch=launch).run()
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from specchat.bench import command

    model_thread.adopt()
    return command.run(args)


def cmd_tune(args: argparse.Namespace) -> int:
    from specchat import tune

    model_thread.adopt()
    return tune.run(args)


def cmd_rpc_server(args: argparse.Namespace) -> int:
    """Serve this machine's GPUs (or CPU) to specchat's --rpc on other machines."""
    from specchat.loading import require_llama_cpp

    require_llama_cpp()
    from specchat.backends import rpc

    rpc.serve(args.host, args.port, args.threads, args.cache, args.expose)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """The app in web browsers: each tab runs `specchat APP ARGS` (the arguments after --)."""
    from specchat.web.tab_server import tab_server

    app_args = args.app_args[1:] if args.app_args[:1] == ["--"] else args.app_args
    tab_server(app_args, args.host, args.port, args.expose, args.max_sessions, args.open).serve()
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    if args.models_command == "optimize":  # it measures with the models: above the catalog
        from specchat.optimize import command as optimize

        model_thread.adopt()
        return optimize.run(args)
    from specchat.catalog import commands

    return commands.run(args)


def _formats(text: str) -> tuple[str, ...]:
    formats = tuple(dict.fromkeys(f.strip() for f in text.split(",")))
    if not formats or not set(formats) <= {"svg", "html"}:
        raise argparse.ArgumentTypeError(f"{text!r}: svg, html or svg,html")
    return formats


def build_parser(defaults: Settings | None = None) -> argparse.ArgumentParser:
    """The parser; `defaults` (the config file's settings) are the flags' defaults."""
    defaults = defaults or Settings()
    parser = argparse.ArgumentParser(
        prog="specchat", description="Chat with a local model pair and watch speculative decoding."
    )
    sub = parser.add_subparsers(dest="command")
    ask = sub.add_parser("ask", help="one prompt, streamed, with verdict colours and stats")
    ask.add_argument("prompt")
    ask.add_argument("--json", action="store_true", help="one JSON object per event")
    ask.add_argument("--trace", metavar="FILE", help="also record the turn as a trace file")
    settings_schema.add_arguments(ask, defaults)
    ask.set_defaults(func=cmd_ask)
    tui = sub.add_parser("tui", help="the full-screen app (the default command)")
    settings_schema.add_arguments(tui, defaults)
    tui.set_defaults(func=cmd_tui)
    chat = sub.add_parser("chat", help="a line-based chat for plain terminals")
    settings_schema.add_arguments(chat, defaults)
    chat.set_defaults(func=cmd_chat)
    replay = sub.add_parser(
        "replay", help="play a recorded trace in the app, no model needed; two or more race "
                       "side by side")
    replay.add_argument("files", nargs="*", metavar="TRACE",
                        help="trace files or names of shipped traces (see --list)")
    replay.add_argument("--list", action="store_true", help="list the shipped traces")
    replay.add_argument("--step", action="store_true",
                        help="step-through: each round waits for Space")
    replay.add_argument("--speed", type=float, default=1.0, help="2 = twice as fast")
    replay.add_argument("--export", type=_formats, metavar="svg|html|svg,html",
                        help="write slides instead of playing: each turn (coloured tokens, "
                             "legend, stats), and the race of two or more traces (SVG)")
    replay.add_argument("--out", type=Path, default=Path("specchat-slides"), metavar="DIR",
                        help="where --export writes (default: %(default)s)")
    replay.add_argument("--theme", default="specchat-projector",
                        help="the theme of the slides (default: %(default)s, high contrast)")
    replay.set_defaults(func=cmd_replay)
    server = sub.add_parser(
        "rpc-server", help="serve this machine's GPU (or CPU) to --rpc on other machines")
    server.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: %(default)s, this machine only)")
    server.add_argument("--port", type=int, default=50052, help="(default: %(default)s)")
    server.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    server.add_argument("--cache", type=Path, metavar="DIR",
                        help="keep received tensors here, so a model loads faster next time")
    server.add_argument("--expose", action="store_true",
                        help="allow an address other than loopback (no authentication: read "
                             "the warning it prints)")
    server.set_defaults(func=cmd_rpc_server)
    web = sub.add_parser(
        "serve", help="the app in web browsers, each tab its own specchat (a workshop room)",
        description="Serve specchat to web browsers: each tab runs its own `specchat APP ARGS`, "
                    "e.g. `specchat serve --expose -- --server http://127.0.0.1:8080` for a room "
                    "sharing one llama-server, or `-- replay code-0.5b-draft-k3` with no models.")
    web.add_argument("--host", help="address to listen on (default: 127.0.0.1, or every "
                                    "address with --expose)")
    web.add_argument("--port", type=int, default=8000, help="(default: %(default)s)")
    web.add_argument("--expose", action="store_true",
                     help="listen beyond this machine (no authentication: read the warning it "
                          "prints)")
    web.add_argument("--open", action="store_true",
                     help="with --expose: no access code (anyone who reaches the port gets in)")
    web.add_argument("--max-sessions", type=int, default=8, metavar="N",
                     help="tabs served at once; one more gets a page saying the room is full "
                          "(default: %(default)s)")
    web.add_argument("app_args", nargs=argparse.REMAINDER, metavar="-- APP ARGS",
                     help="what each tab runs, as after `specchat` (default: the app)")
    web.set_defaults(func=cmd_serve)
    from specchat.bench.command import add_parser as add_bench_parser
    from specchat.catalog.commands import add_parser as add_models_parser

    add_models_parser(sub).set_defaults(func=cmd_models)
    add_bench_parser(sub, defaults).set_defaults(func=cmd_bench)
    from specchat.tune import add_parser as add_tune_parser
    from specchat.workshop import add_parsers as add_workshop_parsers

    add_tune_parser(sub, defaults).set_defaults(func=cmd_tune)
    add_workshop_parsers(sub, defaults)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from specchat.config import Config

    config = Config.load()
    defaults, problems = settings_schema.from_config(config.section("engine"))
    for line in ([config.error] if config.error else []) + config.problems + problems:
        print(f"specchat: warning: {line}", file=sys.stderr)
    parser = build_parser(defaults)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["tui", *argv]
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except SpecchatError as exc:
        print(f"specchat: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("specchat: interrupted", file=sys.stderr)
        return 130
