"""`specchat bench`: the prompt suite over drafters and k (specchat/bench/command.py)."""

from __future__ import annotations

import argparse

from specchat.native import model_thread
from specchat.settings import Settings


def add_parser(sub: argparse._SubParsersAction, defaults: Settings) -> None:
    from specchat.bench.command import add_parser as add_bench_parser

    add_bench_parser(sub, defaults).set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specchat.bench import command

    model_thread.adopt()
    return command.run(args)
