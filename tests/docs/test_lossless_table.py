"""docs/guide/numbers.md's table of modes is the code's: one row for every mode support.modes
lists, in its order, each naming the check that runs it, and a figure from a run."""

from __future__ import annotations

import re
from pathlib import Path

from support import modes

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "numbers.md"


def test_the_pages_table_has_every_mode_and_its_check_and_a_figure():
    page = PAGE.read_text(encoding="utf-8")
    table = re.search(r"<!-- modes table:[^>]*-->\n(.*?)<!-- end of modes table -->", page, re.S)
    assert table, "numbers.md has no modes table"
    shown = [line.rsplit("|", 2)[0] for line in table.group(1).splitlines()]
    expected = [line.rsplit("|", 2)[0] for line in modes.modes_table({})]
    assert shown == expected
    figures = [line.rsplit("|", 2)[1].strip() for line in table.group(1).splitlines()[2:]]
    assert all(f and f != "not run in this run" for f in figures)
