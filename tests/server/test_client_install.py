"""The light install a workshop attendee runs: `./install.sh --client` into a fresh virtual
environment compiles nothing and installs neither llama-cpp-python nor torch nor models, yet
chats with a llama-server, replays traces and serves them to a browser, and runs the lesson on
the shipped traces; what needs models here says so in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.browser import TRANSCRIPT, VIEWPORT, Served, browser, colour_pixels, wait_for
from support.processes import offline_pip_env, specchat_env

from specchat.lesson.demos import DEMOS
from specchat.lesson.script import load_lesson
from specchat.loading import NEEDS_LLAMA_CPP
from specchat.ui.theming import DEFAULT_TOKEN_COLOURS

ROOT = Path(__file__).resolve().parents[2]


def test_the_client_install_compiles_nothing_and_chats_with_a_server(spec_server, chromium,
                                                                     tmp_path):
    venv = tmp_path / "client"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run([str(ROOT / "install.sh"), "--client"],
                          env={**env, **offline_pip_env(), "VIRTUAL_ENV": str(venv)},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "building llama-cpp-python" not in proc.stdout
    installed = json.loads(subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list",
                                           "--format", "json"], capture_output=True, text=True,
                                          check=True).stdout)
    names = {p["name"].lower() for p in installed}
    assert "specchat" in names and not names & {"llama-cpp-python", "llama_cpp_python", "torch",
                                                "transformers"}

    def client(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(venv / "bin" / "specchat"), *args], capture_output=True,
                              text=True, env=specchat_env(tmp_path) | {"PYTHONPATH": ""},
                              timeout=120)

    listed = client("replay", "--list")
    assert listed.returncode == 0 and "code-0.5b-draft-k3" in listed.stdout
    lesson = client("lesson", "--export", str(tmp_path / "lesson"))  # no models: the traces
    assert lesson.returncode == 0, lesson.stderr
    assert lesson.stderr.startswith(f"specchat lesson: on the shipped traces ({NEEDS_LLAMA_CPP}")
    steps = load_lesson(None, frozenset(DEMOS)).steps
    assert len(list((tmp_path / "lesson").glob("lesson-*.svg"))) == len(steps) == 16
    assert (tmp_path / "lesson" / "presenter-notes.md").is_file()
    local = client("ask", "hello")
    assert local.returncode == 2
    assert local.stderr.strip().splitlines() == [f"specchat: error: {NEEDS_LLAMA_CPP}"]
    served = client("ask", "hello", "--server", spec_server.url, "--max-tokens", "8", "--json")
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout.splitlines()[-1])["n_tokens"] == 8
    room = Served(tmp_path, "replay", "edit-ngram-k3", "--speed", "4",
                  program=[str(venv / "bin" / "specchat")], env={"PYTHONPATH": ""})
    try:
        with browser(chromium) as b:
            page = b.new_page(viewport=VIEWPORT)
            assert page.goto(room.url).status == 200
            wait_for(lambda: colour_pixels(page.screenshot(), DEFAULT_TOKEN_COLOURS["spec-accepted"],
                                           TRANSCRIPT) > 200,
                     "the served replay in the accepted colour", timeout=90)
    finally:
        room.stop()
