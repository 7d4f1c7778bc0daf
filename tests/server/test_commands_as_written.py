"""The commands README.md and docs/guide/workshop.md show run as written, so the pages cannot
drift from what works: every `.venv/bin/specchat` line of their tested blocks (marked
`run as written by` this file), on the tiny pair laid in a models folder under the default pair's
file names (the catalog resolves `default` to them), against the real llama-server. The
full-screen app starts in a terminal of its own and quits on Ctrl+Q; a command that serves runs
until it says where, answers there, and leaves no process behind on Ctrl-C; the others run to
their first real output. (`./install.sh` is the one line not run here: it made this test's
environment, and CI runs it.)"""

from __future__ import annotations

import os
import re
import shlex
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support.browser import wait_for
from support.processes import Started, in_terminal, specchat_env

from specchat.catalog.catalog import Catalog

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "guide" / "workshop.md"]
MARK = "tests/server/test_commands_as_written.py"
SERVING = {  # a command that stays up -> the line that says where it answers
    "room": r"^specchat serve on (http://\S+)",
    "llama-server": r"^specchat --server (http://\S+) --baseline-server http://\S+$",
    "serve": r"^specchat serve on (http://\S+)",
}


def page_lines() -> list[str]:
    blocks = [block for page in PAGES for block in re.findall(
        r"<!--[^>]*" + re.escape(MARK) + r"[^>]*-->\n```sh\n(.*?)```",
        page.read_text(encoding="utf-8"), flags=re.S)]
    return list(dict.fromkeys(line for block in blocks for line in block.splitlines()
                              if line.strip()))


def test_the_pages_have_tested_commands():
    lines = page_lines()
    assert "./install.sh" in lines and ".venv/bin/specchat room --expose" in lines
    assert {".venv/bin/specchat", ".venv/bin/specchat tune --save"} <= set(lines)
    assert all(line == ".venv/bin/specchat" or line.startswith(".venv/bin/specchat ")
               for line in lines if line != "./install.sh")


@pytest.fixture
def default_pair(tiny, tmp_path) -> Path:
    """A models folder holding the tiny pair under the default pair's file names."""
    catalog = Catalog.load()
    models = tmp_path / "models"
    models.mkdir()
    for role, path in (("target", tiny.target), ("draft", tiny.draft)):
        os.link(path, models / catalog.models[catalog.pairs["default"][role]].file)
    return models


@pytest.mark.parametrize("line", [line for line in page_lines() if line != "./install.sh"])
def test_a_command_of_the_pages_works_as_written(line, default_pair, server_binary, tmp_path):
    args = shlex.split(line)[1:]
    env = specchat_env(tmp_path) | {"SPECCHAT_LLAMA_SERVER": str(server_binary)}
    if not args:  # the full-screen app, up with the pair loaded
        assert in_terminal(args, env, "Enter sends", size=(45, 240)) == (True, 0)
        return
    if args[0] not in SERVING:
        import subprocess

        done = subprocess.run([sys.executable, "-m", "specchat", *args], capture_output=True,
                              text=True, env=env, timeout=240, cwd=tmp_path)
        if args[0] == "tune" and "other programs used" in done.stdout:  # a loaded host
            assert done.returncode == 2 and "not saving" in done.stderr
            return
        assert done.returncode == 0, done.stderr
        first = {"models": str(default_pair), "ask": "", "tune": ""}[args[0]]
        assert done.stdout.strip().startswith(first) and done.stdout.strip()
        if args[0] == "tune":
            assert "recommended: " in done.stdout and (tmp_path / "config.toml").exists()
        return
    started = Started(tmp_path, server_binary, *args)
    try:
        url = started.line(SERVING[args[0]]).group(1)
        url = re.sub(r"//[^/:]+:", "//127.0.0.1:", url)  # the attendees' address, from here
        health = url.rstrip("/") + "/health" if args[0] == "llama-server" else url
        assert wait_for(lambda: _answers(health), f"{health} answering", timeout=60) == 200
    finally:
        left = started.interrupt()
    assert left == []


def _answers(url: str) -> int | None:
    """The status of a GET (None while nothing listens yet: serve says where before it binds)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status
    except ConnectionRefusedError:
        return None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return None
        raise
