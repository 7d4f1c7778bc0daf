"""`specchat tune`: what pays on this machine (specchat/tune.py)."""

from __future__ import annotations

import argparse

from specchat.native import model_thread
from specchat.settings import Settings


def add_parser(sub: argparse._SubParsersAction, defaults: Settings) -> None:
    from specchat.tune import add_parser as add_tune_parser

    add_tune_parser(sub, defaults).set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specchat import tune

    model_thread.adopt()
    return tune.run(args)
