"""`specchat llama-server` and `specchat room` (specchat/workshop.py builds their parsers)."""

from __future__ import annotations

import argparse

from specchat.settings import Settings


def add_parser(sub: argparse._SubParsersAction, defaults: Settings) -> None:
    from specchat.workshop import add_parsers

    add_parsers(sub, defaults)
