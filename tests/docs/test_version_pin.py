"""llama-cpp-python's version is written in one place, pyproject.toml's `local` extra: install.sh
and the GPU bundle read it there, and the installed build is that version."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READERS = [ROOT / "install.sh", ROOT / "benchmarks" / "gpu" / "prepare.sh"]


def pin() -> str:
    local = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["local"]
    (version,) = [d.split("==")[1] for d in local if d.startswith("llama-cpp-python==")]
    return version


def test_the_scripts_read_the_pin_and_write_no_version_of_their_own():
    version = pin()
    for script in READERS:
        text = script.read_text()
        assert "pyproject.toml" in text
        assert not re.search(r"\b0\.\d+\.\d+\b", text), f"{script.name} writes a version itself"
        line = next(x for x in text.splitlines() if "llama-cpp-python==" in x and "sed" in x)
        command = line.split("=", 1)[1].split("  #")[0]
        read = subprocess.run(["bash", "-c", f"echo {command}"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        assert read == version, f"{script.name} reads {read!r}, pyproject.toml pins {version!r}"


def test_the_installed_llama_cpp_python_is_the_pinned_one():
    import importlib.metadata

    import pytest

    try:
        installed = importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("llama-cpp-python is not installed (the client install)")
    assert installed == pin()
