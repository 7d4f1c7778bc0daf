"""The README and the guide: every relative link lands on a file of this repository (and on a
heading of it, where the link names one), and the README stays a newcomer's page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    heads = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_lands(page):
    broken = []
    for target in relative_links(page):
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(target)
    assert broken == []


def test_the_readme_is_a_page_a_newcomer_reads_and_links_the_guide():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    guide = {p.name for p in (ROOT / "docs" / "guide").glob("*.md")}
    assert guide and guide <= {Path(t).name for t in relative_links(ROOT / "README.md")}
    assert "./install.sh --dev && .venv/bin/python -m pytest" in readme


def test_a_broken_link_is_found(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# A heading\n")
    page.write_text("[ok](there.md#a-heading) [gone](missing.md) [bad](there.md#nope)\n"
                    "```\n[code](not-checked.md)\n```\n")
    links = relative_links(page)
    assert links == ["there.md#a-heading", "missing.md", "there.md#nope"]
    assert "a-heading" in anchors(tmp_path / "there.md") and "nope" not in anchors(tmp_path / "there.md")


def test_ci_runs_the_readmes_test_command_each_half_on_a_line_of_its_own():
    """Under `set -e` a failure left of `&&` does not stop a script: CI runs README's `A && B`
    as A, then B, so an install that fails fails CI instead of skipping the tests."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = next(line for line in readme.splitlines() if line.startswith("./install.sh --dev &&"))
    lines = [x.strip() for x in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "set -euo pipefail" in lines
    for half in (h.strip() for h in command.split("&&")):
        assert half in lines or f"offline {half}" in lines, (
            f".ci/run does not run {half!r} on a line of its own")
    assert command not in lines


def test_every_lab_entry_is_in_the_lab_index_and_the_standing_page_is_short():
    """docs/lab/ keeps the history; docs/benchmark.md says where specchat stands now, briefly."""
    lab = ROOT / "docs" / "lab"
    entries = {p.name for p in lab.glob("*.md") if p.name != "README.md"}
    assert entries and entries == {Path(link).name for link in relative_links(lab / "README.md")
                                   if not link.startswith("..")}
    assert len((ROOT / "docs" / "benchmark.md").read_text(encoding="utf-8").splitlines()) < 300
