"""`specchat`: the commands (specchat/commands/) behind one parser. User errors print one line
and exit 2, never a traceback."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from specchat import settings as settings_schema
from specchat.errors import SpecchatError
from specchat.settings import Settings

EXIT_USAGE = 2
ORDER = ("ask", "tui", "chat", "replay", "lesson", "rpc_server", "serve", "models", "bench",
         "tune", "workshop")
"""The commands' modules (specchat/commands/), in the order `--help` lists them."""


def build_parser(defaults: Settings | None = None) -> argparse.ArgumentParser:
    """The parser; `defaults` (the config file's settings) are the flags' defaults."""
    defaults = defaults or Settings()
    parser = argparse.ArgumentParser(
        prog="specchat", description="Chat with a local model pair and watch speculative decoding."
    )
    sub = parser.add_subparsers(dest="command")
    for name in ORDER:
        importlib.import_module(f"specchat.commands.{name}").add_parser(sub, defaults)
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
