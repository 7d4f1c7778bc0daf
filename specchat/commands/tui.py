"""`specchat tui` (what `specchat` with no command runs): the full-screen app."""

from __future__ import annotations

import argparse

from specchat import settings as settings_schema
from specchat.settings import Settings


def add_parser(sub: argparse._SubParsersAction, defaults: Settings) -> None:
    tui = sub.add_parser("tui", help="the full-screen app (the default command)")
    settings_schema.add_arguments(tui, defaults)
    tui.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specchat.ui.app import SpecchatApp

    SpecchatApp(settings_schema.from_args(args)).run()
    return 0
