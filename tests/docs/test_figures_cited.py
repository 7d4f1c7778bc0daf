"""Every measured figure on README and the guide's pages names its run: a block (a paragraph,
a list item, a table row) that holds a figure (a number with x, %, tok/s, ms or nats) cites a
lab entry, docs/benchmark.md or a standing comparison it lists, and each figure's numbers are in what it cites. A
figure that is a setting or a definition is named in a comment in its block (`<!-- not
measured: 3% (tune's margin) -->`); "95% interval" is a definition wherever it stands; the
modes table is a test run's, checked by test_lossless_table.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))?(x|%| tok/s| ms| nats)(?!\w)")
DEFINITION = re.compile(r"\d+%\s+(?:interval|confidence)|95%: ")
SOURCE = re.compile(r"(?:docs/|\.\./|\()((?:lab/[\w.-]+|benchmark|gpu|server|policy|divergence|"
                    r"transformers)\.md)")
"""A lab entry, or docs/benchmark.md and the standing comparisons it lists."""
NOT_MEASURED = re.compile(r"<!-- not measured:(.*?)-->", re.S)
CHECKED_ELSEWHERE = "<!-- modes table:"


def blocks(page: Path) -> list[str]:
    """Paragraphs, list items and table rows, outside code blocks."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    out: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        lines = para.splitlines()
        if lines and all(line.lstrip().startswith("|") for line in lines):
            out += lines
            continue
        items = re.split(r"\n(?=\s*(?:[-*]|\d+\.) )", para)
        out += items
    return out


def figures(block: str) -> list[str]:
    """The numbers of each measured figure in a block ("0.75-0.88x": 0.75 and 0.88)."""
    settings = {n for note in NOT_MEASURED.findall(block) for n in numbers(note)}
    return [n for n in numbers(DEFINITION.sub("", NOT_MEASURED.sub("", block)))
            if n not in settings]


def numbers(text: str) -> list[str]:
    return [n for a, b, _ in FIGURE.findall(text) for n in (a, b) if n]


def cited(block: str) -> list[Path]:
    return [ROOT / "docs" / name for name in SOURCE.findall(block)]


def problems(page: Path) -> list[str]:
    found = []
    for block in blocks(page):
        measured = figures(block)
        if not measured or CHECKED_ELSEWHERE in block:
            continue
        sources = cited(block)
        head = " ".join(block.split())[:70]
        if not sources:
            found.append(f"cites no run: {head}")
            continue
        text = " ".join(p.read_text(encoding="utf-8") for p in sources if p.exists())
        missing = [n for n in measured if not re.search(rf"(?<![\d.]){re.escape(n)}(?!\d)", text)]
        if missing:
            found.append(f"{', '.join(missing)} not in {', '.join(p.name for p in sources)}: "
                         f"{head}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_names_its_run_and_its_run_holds_it(page):
    assert problems(page) == []


def test_a_figure_its_run_does_not_hold_is_found(tmp_path):
    """The check can fail: a figure changed by a hundredth, and one without a citation."""
    entry = "2026-12-05-a-catch-up-earned-back-over-as-many-tokens.md"
    page = tmp_path / "page.md"
    page.write_text(f"Code ran at 1.33x ([lab](../lab/{entry})).\n\n"
                    f"Code ran at 1.34x ([lab](../lab/{entry})).\n\nProse ran at 0.92x.\n")
    assert [p.split(":")[0] for p in problems(page)] == ["1.34 not in " + entry, "cites no run"]
