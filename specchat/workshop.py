"""The workshop commands: `specchat llama-server` (llama.cpp's own server on a pair, no path
typed) and `specchat room` (those servers, with the target alone beside them for the speedup,
and `specchat serve` pointed at them, the attendees' address printed with a QR code). Both stay
in the foreground; Ctrl-C, or a `kill` (SIGTERM), stops every process they started."""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

from specchat import local_server
from specchat.errors import SpecchatError
from specchat.exposure import is_loopback
from specchat.native import llama_tools
from specchat.settings import Settings


def _add_pair_flags(p: argparse.ArgumentParser, defaults: Settings, port: int,
                    slots: int) -> None:
    p.add_argument("--target", default="default",
                   help="GGUF path, catalog name, or 'default' (default: %(default)s)")
    p.add_argument("--draft", default="default",
                   help="GGUF path, catalog name, 'default', 'ngram' or 'none' (default: "
                        "%(default)s)")
    p.add_argument("--k", type=int, default=defaults.draft.k,
                   help="tokens drafted per round (default: %(default)s, as the settings)")
    p.add_argument("--slots", type=int, default=slots,
                   help="replies the server generates at once (default: %(default)s)")
    p.add_argument("--ctx", type=int, default=defaults.models.n_ctx,
                   help="context tokens per slot (default: %(default)s)")
    p.add_argument("--port", type=int, default=port, help="(default: %(default)s)")
    p.add_argument("--threads", type=int, help="CPU threads (default: llama-server's own)")
    p.add_argument("--expose", action="store_true",
                   help="listen beyond this machine (read the warning it prints)")


def add_parsers(sub: argparse._SubParsersAction, defaults: Settings) -> None:
    ls = sub.add_parser(
        "llama-server", help="llama.cpp's own server on a model pair, with no path typed",
        description="Start llama.cpp's llama-server on the pair (built once from the vendored "
                    "source of the installed llama-cpp-python, or $SPECCHAT_LLAMA_SERVER, or "
                    "the one on the PATH), print the `specchat --server ...` line to paste, "
                    "and stay in the foreground: Ctrl-C stops it.")
    _add_pair_flags(ls, defaults, 8080, 1)
    ls.add_argument("--host", help="address to listen on (default: 127.0.0.1, or every "
                                   "address with --expose)")
    ls.add_argument("--baseline", action="store_true",
                    help="also start the same target alone on the next port: the speedup's "
                         "baseline (--baseline-server)")
    ls.add_argument("extra", nargs=argparse.REMAINDER, metavar="-- EXTRA",
                    help="more llama-server flags, as given")
    ls.set_defaults(func=run_llama_server)
    room = sub.add_parser(
        "room", help="a workshop room in one command: the llama-servers and the app for "
                     "every browser tab",
        description="Start the llama-server on the pair (and the target alone, for the "
                    "speedup) and `specchat serve` on them, with as many tabs as slots; print "
                    "the address attendees open, with a QR code. Ctrl-C stops everything.")
    _add_pair_flags(room, defaults, 8000, 8)
    room.add_argument("--lesson", action="store_true",
                      help="every tab opens `specchat lesson` on the room's servers, following "
                           "the presenter's step (the presenter's address is printed)")
    room.add_argument("--open", action="store_true",
                      help="with --expose: no access code (anyone who reaches the port gets in)")
    room.add_argument("app_args", nargs=argparse.REMAINDER, metavar="-- APP ARGS",
                      help="more arguments for every tab's specchat (e.g. --max-tokens 128)")
    room.set_defaults(func=run_room)


def _server_binary(err: Console) -> Path:
    with Progress(TextColumn("building llama-server (once)"), BarColumn(),
                  TextColumn("{task.percentage:>3.0f}%"), console=err, transient=True) as bar:
        task = bar.add_task("build", total=100)
        binary, version = llama_tools.find_server(lambda done: bar.update(task, completed=done))
    err.print(f"llama-server: {binary} ({version})", highlight=False)
    return binary


def _stop_on_term() -> None:
    """SIGTERM (`kill`, a service manager) ends the command as Ctrl-C does, through the
    `finally` that stops the servers: by default it would end Python at once and leave the
    llama-servers running. It is also the way to stop a command started in the background,
    where the shell passes Ctrl-C on ignored."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def _stay(servers: local_server.Servers) -> None:
    """Until Ctrl-C, or until a server stops by itself (then say which)."""
    while (why := servers.exited()) is None:
        time.sleep(0.5)
    raise SpecchatError(why)


def _pair(plan: local_server.ServerPlan) -> str:
    return plan.target.name + (f" with draft {plan.draft.name}" if plan.draft else "")


def _rest(args: list[str]) -> list[str]:
    return args[1:] if args[:1] == ["--"] else args


def run_llama_server(args: argparse.Namespace) -> int:
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    host = args.host or ("0.0.0.0" if args.expose else "127.0.0.1")
    plan = local_server.plan(_server_binary(err), args.target, args.draft, args.k, args.slots,
                             args.ctx, host, args.port, args.expose, args.threads,
                             tuple(_rest(args.extra)))
    if not is_loopback(host):
        err.print(f"warning: llama-server at {host}:{args.port} has no authentication: anyone "
                  "who can reach the port can use the models on this machine")
    logs = Path(tempfile.mkdtemp(prefix="specchat-llama-server-"))
    err.print(f"starting {_pair(plan)}; logs in {logs}")
    _stop_on_term()
    servers, line = local_server.start_pair(plan, args.baseline, logs)
    try:
        print(line, flush=True)
        err.print("Ctrl-C stops " + ("both servers" if args.baseline else "the server"))
        _stay(servers)
    finally:
        servers.stop()
    return 0


def run_room(args: argparse.Namespace) -> int:
    import segno

    from specchat.web.tab_server import lan_address, tab_server

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    plan = local_server.plan(_server_binary(err), args.target, args.draft, args.k, args.slots,
                             args.ctx, "127.0.0.1", args.port + 1, False)
    local_server.port_free("0.0.0.0" if args.expose else "127.0.0.1", args.port)
    logs = Path(tempfile.mkdtemp(prefix="specchat-room-"))
    err.print(f"starting {_pair(plan)} for {args.slots} tabs; logs in {logs}")
    _stop_on_term()
    servers, _ = local_server.start_pair(plan, True, logs)
    try:
        server = tab_server(["lesson"] * args.lesson + [
            "--server", plan.url(plan.port), "--baseline-server", plan.url(plan.port + 1),
            *_rest(args.app_args)], None, args.port, args.expose, args.slots, args.open)
        host = lan_address() if args.expose else "127.0.0.1"
        print(f"the presenter opens {server.address(host, presenter=True)}", flush=True)
        address = server.address(host)
        print(f"attendees open {address}", flush=True)
        segno.make(address, error="l").terminal(out=sys.stdout, compact=True)
        sys.stdout.flush()
        server.serve()
    finally:
        servers.stop()
    return 0
