"""`specchat models ...`: the catalog's commands, and `models optimize`, which measures with the
models (above the catalog)."""

from __future__ import annotations

import argparse

from specchat.native import model_thread
from specchat.settings import Settings


def add_parser(sub: argparse._SubParsersAction, defaults: Settings) -> None:
    from specchat.catalog.commands import add_parser as add_models_parser

    add_models_parser(sub).set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.models_command == "optimize":
        from specchat.optimize import command as optimize

        model_thread.adopt()
        return optimize.run(args)
    from specchat.catalog import commands

    return commands.run(args)
