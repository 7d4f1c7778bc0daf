"""`specchat`: ask, chat, models. User errors print one line and exit 2, never a traceback."""

from __future__ import annotations

import argparse
import contextlib
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


ENGINE_DEFAULTS: dict[str, object] = {
    "k": 3, "policy": "fixed", "n_min": 0, "p_min": 0.0, "max_tokens": 256, "temperature": 0.0, "top_k": 0,
    "top_p": 1.0, "seed": None, "target_gpu_layers": None, "draft_gpu_layers": None,
}
"""Built-in defaults; the config file's [engine] section (the TUI's settings) overrides them."""


def _add_model_options(p: argparse.ArgumentParser, defaults: dict[str, object]) -> None:
    g = p.add_argument_group("models")
    g.add_argument("--target", default="default",
                   help="GGUF path, catalog name, or 'default' (default: %(default)s)")
    g.add_argument("--draft", default="default",
                   help="GGUF path, catalog name, 'default', 'ngram', 'ngram+MODEL' (n-gram matches "
                        "first, the model otherwise) or 'none' (default: %(default)s)")
    g.add_argument("--ctx", type=int, default=4096, help="context size in tokens")
    g.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    g.add_argument("--target-gpu-layers", type=int, default=defaults["target_gpu_layers"],
                   help="layers of the target on the GPU (default: all, where a GPU backend exists)")
    g.add_argument("--draft-gpu-layers", type=int, default=defaults["draft_gpu_layers"],
                   help="layers of the draft on the GPU (default: all, where a GPU backend exists)")
    g.add_argument("--backend", choices=("llamacpp", "transformers"), default="llamacpp",
                   help="llamacpp (GGUF) or transformers (torch: checkpoint folders or GGUF, "
                        "needs the transformers extra)")
    g.add_argument("--device", default=None, help="transformers: cpu, cuda or mps (default: auto)")
    g.add_argument("--dtype", default="auto",
                   help="transformers: float32, bfloat16 or float16 (default: auto)")
    g.add_argument("--ngram-n", type=int, default=3, help="shortest match the n-gram drafter uses")
    g.add_argument("--ngram-n-max", type=int, default=12, help="longest match it looks for first")
    s = p.add_argument_group("speculation and sampling")
    s.add_argument("--policy", choices=("fixed", "adaptive"), default=defaults["policy"],
                   help="fixed: draft k tokens a round; adaptive: choose up to k each round from "
                        "measured costs and acceptance")
    s.add_argument("--k", type=int, default=defaults["k"],
                   help="tokens to draft per round (adaptive: the most per round)")
    s.add_argument("--n-min", type=int, default=defaults["n_min"], help="drop drafts shorter than this")
    s.add_argument("--p-min", type=float, default=defaults["p_min"],
                   help="stop drafting when the draft's top probability is below this")
    s.add_argument("--max-tokens", type=int, default=defaults["max_tokens"])
    s.add_argument("--temperature", type=float, default=defaults["temperature"], help="0 = greedy")
    s.add_argument("--top-k", type=int, default=defaults["top_k"])
    s.add_argument("--top-p", type=float, default=defaults["top_p"])
    s.add_argument("--seed", type=int, default=defaults["seed"])
    s.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    s.add_argument("--system", default=None, help="system message")


def _model_options(args: argparse.Namespace):
    from specchat.loading import ModelOptions

    return ModelOptions(n_ctx=args.ctx, threads=args.threads,
                        target_gpu_layers=args.target_gpu_layers,
                        draft_gpu_layers=args.draft_gpu_layers, ngram_n=args.ngram_n,
                        ngram_n_max=args.ngram_n_max, backend=args.backend, device=args.device,
                        dtype=args.dtype)


def _sampling(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(args.temperature, args.top_k, args.top_p, args.seed)


def _draft_settings(args: argparse.Namespace) -> DraftSettings:
    return DraftSettings(args.k, args.n_min, args.p_min, args.policy == "adaptive")


def _engine(args: argparse.Namespace):
    from specchat.loading import build_engine

    return build_engine(args.target, args.draft, _sampling(args), _draft_settings(args),
                        _model_options(args))


def _generation(args: argparse.Namespace) -> GenerationSettings:
    return GenerationSettings(max_tokens=args.max_tokens, stop=list(args.stop))


def cmd_ask(args: argparse.Namespace) -> int:
    from specchat.chat.session import ChatSession, Conversation
    from specchat.render import JsonRenderer, TerminalRenderer

    engine = _engine(args)
    session = ChatSession(engine, Conversation(system=args.system))
    if args.json:
        sinks: list[Callable[[Event], None]] = [JsonRenderer(sys.stdout)]
    else:
        sinks = [TerminalRenderer(Console(highlight=False), Console(stderr=True))]
    with contextlib.ExitStack() as stack:
        if args.trace:
            from specchat.trace import TraceWriter

            meta = {"prompt": args.prompt, "system": args.system,
                    "target": engine.target.name, "draft": engine.drafter.name,
                    "settings": {k: getattr(args, k) for k in ENGINE_DEFAULTS}}
            sinks.append(TraceWriter(stack.enter_context(open(args.trace, "w", encoding="utf-8")),
                                     meta))
        for event in session.turn(args.prompt, _generation(args)):
            for sink in sinks:
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


def cmd_tui(args: argparse.Namespace) -> int:
    from specchat.ui.app import AppSettings, SpecchatApp

    settings = AppSettings(
        target=args.target, draft=args.draft, sampling=_sampling(args),
        draft_settings=_draft_settings(args), generation=_generation(args),
        models=_model_options(args), system=args.system,
    )
    SpecchatApp(settings).run()
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from specchat.trace import read_trace, shipped_traces
    from specchat.ui.app import AppSettings, SpecchatApp

    if args.list or not args.files:
        for path in shipped_traces():
            trace = read_trace(path)
            print(f"{path.stem:<28} {trace.meta.get('draft', '?'):<36} {trace.prompt[:60]!r}")
        return 0
    traces = [read_trace(f) for f in args.files]
    if len(traces) == 1:
        settings = AppSettings(replay=traces[0], replay_speed=args.speed, step=args.step)
    else:
        settings = AppSettings(race=traces, replay_speed=args.speed)
    SpecchatApp(settings).run()
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from specchat.bench import command

    return command.run(args)


def cmd_models(args: argparse.Namespace) -> int:
    from specchat.catalog import commands

    return commands.run(args)


def build_parser(engine_defaults: dict[str, object] | None = None) -> argparse.ArgumentParser:
    defaults = {**ENGINE_DEFAULTS, **(engine_defaults or {})}
    parser = argparse.ArgumentParser(
        prog="specchat", description="Chat with a local model pair and watch speculative decoding."
    )
    sub = parser.add_subparsers(dest="command")
    ask = sub.add_parser("ask", help="one prompt, streamed, with verdict colours and stats")
    ask.add_argument("prompt")
    ask.add_argument("--json", action="store_true", help="one JSON object per event")
    ask.add_argument("--trace", metavar="FILE", help="also record the turn as a trace file")
    _add_model_options(ask, defaults)
    ask.set_defaults(func=cmd_ask)
    tui = sub.add_parser("tui", help="the full-screen app (the default command)")
    _add_model_options(tui, defaults)
    tui.set_defaults(func=cmd_tui)
    chat = sub.add_parser("chat", help="a line-based chat for plain terminals")
    _add_model_options(chat, defaults)
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
    replay.set_defaults(func=cmd_replay)
    from specchat.bench.command import add_parser as add_bench_parser
    from specchat.catalog.commands import add_parser as add_models_parser

    add_models_parser(sub).set_defaults(func=cmd_models)
    add_bench_parser(sub).set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from specchat.config import Config

    config = Config.load()
    engine = {k: v for k, v in config.section("engine").items() if k in ENGINE_DEFAULTS}
    parser = build_parser(engine)
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
