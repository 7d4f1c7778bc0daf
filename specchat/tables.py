"""Where a command prints its tables."""

from __future__ import annotations

import sys

from rich.console import Console

TABLE_WIDTH = 200
"""Columns a table may take where the output is a file or a pipe."""


def table_console() -> Console:
    """Where tables are printed: a terminal at its own width (tables fold their cells to fit),
    a file or a pipe in lines as wide as a table needs, where rich's 80 columns would cut every
    cell to "…"."""
    return Console(highlight=False, width=None if sys.stdout.isatty() else TABLE_WIDTH)
