"""`specchat rpc-server`: this machine's GPUs (or CPU) served to `--rpc` on other machines."""

from __future__ import annotations

import argparse
from pathlib import Path

from specchat.settings import Settings


def add_parser(sub: argparse._SubParsersAction, defaults: Settings) -> None:
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
    server.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve this machine's GPUs (or CPU) to specchat's --rpc on other machines."""
    from specchat.loading import require_llama_cpp

    require_llama_cpp()
    from specchat.backends import rpc

    rpc.serve(args.host, args.port, args.threads, args.cache, args.expose)
    return 0
