"""`specchat`: ask, chat, models. User errors print one line and exit 2, never a traceback."""

from __future__ import annotations

import argparse
import queue
import sys
import threading
from collections.abc import Callable, Iterator, Sequence

from rich.console import Console

from specchat.engine.events import Event
from specchat.engine.loop import DraftSettings, GenerationSettings
from specchat.engine.sampling import SamplingParams
from specchat.errors import SpecchatError

EXIT_USAGE = 2


def _add_model_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("models")
    g.add_argument("--target", default="default",
                   help="GGUF path, catalog name, or 'default' (default: %(default)s)")
    g.add_argument("--draft", default="default",
                   help="GGUF path, catalog name, 'default', 'ngram' or 'none' (default: %(default)s)")
    g.add_argument("--ctx", type=int, default=4096, help="context size in tokens")
    g.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    g.add_argument("--target-gpu-layers", type=int, default=None,
                   help="layers of the target on the GPU (default: all, where a GPU backend exists)")
    g.add_argument("--draft-gpu-layers", type=int, default=None,
                   help="layers of the draft on the GPU (default: all, where a GPU backend exists)")
    g.add_argument("--ngram-n", type=int, default=3, help="match length of the n-gram drafter")
    s = p.add_argument_group("speculation and sampling")
    s.add_argument("--k", type=int, default=3, help="tokens to draft per round")
    s.add_argument("--n-min", type=int, default=0, help="drop drafts shorter than this")
    s.add_argument("--p-min", type=float, default=0.0,
                   help="stop drafting when the draft's top probability is below this")
    s.add_argument("--max-tokens", type=int, default=256)
    s.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    s.add_argument("--top-k", type=int, default=0)
    s.add_argument("--top-p", type=float, default=1.0)
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    s.add_argument("--system", default=None, help="system message")


def _engine(args: argparse.Namespace):
    from specchat.loading import ModelOptions, build_engine

    sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.seed)
    options = ModelOptions(n_ctx=args.ctx, threads=args.threads,
                           target_gpu_layers=args.target_gpu_layers,
                           draft_gpu_layers=args.draft_gpu_layers, ngram_n=args.ngram_n)
    return build_engine(args.target, args.draft, sampling, DraftSettings(args.k, args.n_min),
                        options, args.p_min)


def _generation(args: argparse.Namespace) -> GenerationSettings:
    return GenerationSettings(max_tokens=args.max_tokens, stop=list(args.stop))


def cmd_ask(args: argparse.Namespace) -> int:
    from specchat.chat.session import ChatSession, Conversation
    from specchat.render import JsonRenderer, TerminalRenderer

    engine = _engine(args)
    session = ChatSession(engine, Conversation(system=args.system))
    if args.json:
        sink: Callable[[Event], None] = JsonRenderer(sys.stdout)
    else:
        sink = TerminalRenderer(Console(highlight=False), Console(stderr=True))
    for event in session.turn(args.prompt, _generation(args)):
        sink(event)
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    """A line-based chat in the terminal; Ctrl-C stops the reply being generated."""
    from specchat.chat.session import ChatSession, Conversation
    from specchat.render import LEGEND, TerminalRenderer

    out, err = Console(highlight=False), Console(stderr=True)
    err.print(f"loading {args.target} with draft {args.draft} …", style="dim")
    session = ChatSession(_engine(args), Conversation(system=args.system))
    render = TerminalRenderer(out, err)
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
        for event in _in_worker(lambda cancel: session.turn(text, _generation(args), cancel)):
            render(event)


def _in_worker(turn: Callable[[threading.Event], Iterator[Event]]) -> Iterator[Event]:
    """Run a turn in a worker thread; Ctrl-C in this thread sets its cancel flag, and the
    engine ends the turn cleanly after the round in flight (caches consistent, reply kept)."""
    cancel = threading.Event()
    items: queue.SimpleQueue[Event | BaseException | None] = queue.SimpleQueue()

    def work() -> None:
        try:
            for event in turn(cancel):
                items.put(event)
        except BaseException as exc:  # handed to the main thread, which raises it
            items.put(exc)
        finally:
            items.put(None)

    threading.Thread(target=work, name="specchat-turn", daemon=True).start()
    while True:
        try:
            item = items.get(timeout=0.1)
        except queue.Empty:
            continue
        except KeyboardInterrupt:
            cancel.set()
            continue
        if item is None:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


def cmd_models(args: argparse.Namespace) -> int:
    from specchat.catalog import commands

    return commands.run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specchat", description="Chat with a local model pair and watch speculative decoding."
    )
    sub = parser.add_subparsers(dest="command")
    ask = sub.add_parser("ask", help="one prompt, streamed, with verdict colours and stats")
    ask.add_argument("prompt")
    ask.add_argument("--json", action="store_true", help="one JSON object per event")
    _add_model_options(ask)
    ask.set_defaults(func=cmd_ask)
    chat = sub.add_parser("chat", help="chat in the terminal (the default command)")
    _add_model_options(chat)
    chat.set_defaults(func=cmd_chat)
    from specchat.catalog.commands import add_parser as add_models_parser

    add_models_parser(sub).set_defaults(func=cmd_models)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["chat", *argv]
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except SpecchatError as exc:
        print(f"specchat: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("specchat: interrupted", file=sys.stderr)
        return 130
