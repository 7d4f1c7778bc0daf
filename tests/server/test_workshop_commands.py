"""The workshop commands as a host runs them, on the tiny pair with the real llama-server:
`specchat llama-server` (the line to paste works, Ctrl-C or a kill leaves no process),
`specchat room` (a tab with the room's code gets a reply drawn in the accepted colour; without
it, a page saying to ask the host and no app process; Ctrl-C leaves no process; a taken port is
one line and starts nothing), and `specchat models path`."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from support.browser import TRANSCRIPT, VIEWPORT, browser, colour_pixels, drawn, send_typed_message, wait_for
from support.processes import Started, free_port, saved_replies, specchat, specchat_env

from specchat.ui.theming import DEFAULT_TOKEN_COLOURS

ACCEPTED = DEFAULT_TOKEN_COLOURS["spec-accepted"]


def test_llama_server_prints_the_line_to_paste_and_ctrl_c_stops_both(server_binary, tiny,
                                                                     tmp_path):
    port = free_port(2)
    started = Started(tmp_path, server_binary, "llama-server", "--target", str(tiny.target),
                      "--draft", str(tiny.draft), "--port", str(port), "--baseline",
                      "--threads", "1", "--ctx", "512")
    try:
        paste = started.line(r"^specchat (--server \S+ --baseline-server \S+)$").group(1)
        assert paste == f"--server http://127.0.0.1:{port} --baseline-server " \
                        f"http://127.0.0.1:{port + 1}"
        servers = [p.cmdline() for p in started.descendants()]
        assert len(servers) == 2
        assert "--spec-type" in servers[0] and "draft-simple" in servers[0]
        assert "-md" not in servers[1]
        reply = specchat("ask", "count: one two three", *paste.split(), "--max-tokens", "12",
                         "--temperature", "0", tmp_path=tmp_path)
        assert reply.returncode == 0 and f"llama-server http://127.0.0.1:{port}" in reply.stderr
        assert "draft server: speculating" in reply.stderr, reply.stderr
    finally:
        left = started.interrupt()
    assert left == []


def test_a_kill_stops_llama_server_and_both_servers_it_started(server_binary, tiny, tmp_path):
    """SIGTERM (`kill`, a service manager, the way to stop a background job) would end Python
    at once and leave the servers running; it stops them as Ctrl-C does."""
    port = free_port(2)
    started = Started(tmp_path, server_binary, "llama-server", "--target", str(tiny.target),
                      "--draft", str(tiny.draft), "--port", str(port), "--baseline",
                      "--threads", "1", "--ctx", "512")
    started.line(r"^specchat --server ")
    assert len(started.descendants()) == 2
    assert started.interrupt(signal.SIGTERM) == []
    assert started.proc.returncode == 130


def test_a_room_lets_in_a_tab_with_its_code_and_ctrl_c_leaves_nothing(server_binary, tiny,
                                                                      tmp_path, chromium):
    port = free_port(3)
    room = Started(tmp_path, server_binary, "room", "--target", str(tiny.target), "--draft",
                   str(tiny.draft), "--slots", "2", "--port", str(port), "--expose",
                   "--threads", "1", "--ctx", "512", "--", "--max-tokens", "24",
                   "--temperature", "0")
    try:
        code = room.line(r"^attendees open http://\S+:\d+/\?code=(\S+)$").group(1)
        banner = room.line(r"^specchat serve on ")
        histories = Path(re.search(r"histories go to (\S+?)\. ", banner.string).group(1))
        with browser(chromium) as b:
            stranger = b.new_page(viewport=VIEWPORT)
            answer = stranger.goto(f"http://127.0.0.1:{port}/?code=wrong{code}")
            assert answer.status == 403 and "Ask the host" in stranger.inner_text("body")
            page = b.new_page(viewport=VIEWPORT)
            assert page.goto(f"http://127.0.0.1:{port}/?code={code}").status == 200
            history = wait_for(lambda: sorted(histories.glob("tab-*.sqlite3")),
                               "a history file for the tab with the code")
            assert len(history) == 1  # the stranger's page started no app
            drawn(page)
            page.keyboard.type("count: one two three")
            send_typed_message(page, history[0])
            wait_for(lambda: [r for r in saved_replies(history[0]) if r[1]],
                     "a complete reply from the room's llama-server", timeout=120)
            wait_for(lambda: colour_pixels(page.screenshot(), ACCEPTED, TRANSCRIPT) > 0,
                     "the reply's accepted drafts in the accepted colour")
    finally:
        left = room.interrupt()
    assert left == []


def test_a_room_on_a_taken_port_is_one_line_and_starts_nothing(server_binary, tiny, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "specchat", "room", "--target", str(tiny.target), "--draft",
             str(tiny.draft), "--port", str(port)], capture_output=True, text=True, timeout=120,
            env=specchat_env(tmp_path) | {"SPECCHAT_LLAMA_SERVER": str(server_binary)})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"port {port} on 127.0.0.1 is taken" in done.stderr.splitlines()[-1]
    assert not [p for p in psutil.process_iter(["cmdline"])
                if str(tiny.target) in " ".join(p.info["cmdline"] or [])]


@pytest.mark.parametrize("missing", ["target", "draft"])
def test_a_missing_model_is_one_line(server_binary, tiny, tmp_path, missing):
    paths = {"target": str(tiny.target), "draft": str(tiny.draft), missing: "nowhere.gguf"}
    done = subprocess.run(
        [sys.executable, "-m", "specchat", "llama-server", "--target", paths["target"],
         "--draft", paths["draft"], "--port", str(free_port())], capture_output=True, text=True,
        timeout=120, env=specchat_env(tmp_path) | {"SPECCHAT_LLAMA_SERVER": str(server_binary)})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "nowhere.gguf" in done.stderr.splitlines()[-1]


def test_models_path_names_the_file_for_scripts(tiny, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    os.link(tiny.draft, models / "tiny-draft.gguf")
    done = specchat("models", "path", "tiny-draft", tmp_path=tmp_path)
    assert done.returncode == 0 and done.stdout == f"{models / 'tiny-draft.gguf'}\n"
    missing = specchat("models", "path", "nope", tmp_path=tmp_path)
    assert missing.returncode == 2 and "unknown model 'nope'" in missing.stderr


def test_a_llama_server_too_old_for_the_client_is_refused_in_one_line(tiny, tmp_path):
    old = tmp_path / "llama-server"
    old.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'version: 2100 (old)' && exit 0\n"
                   "echo '--draft-max N   tokens to draft'\n")
    old.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-m", "specchat", "llama-server", "--target", str(tiny.target),
         "--draft", str(tiny.draft)], capture_output=True, text=True, timeout=120,
        env=specchat_env(tmp_path) | {"SPECCHAT_LLAMA_SERVER": str(old)})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "version: 2100 (old)" in last and "older than specchat needs" in last
    assert "--spec-type" in last


STAND_IN = ("#!/bin/sh\n[ \"$1\" = --version ] && echo 'version: 9999 (stock)' && exit 0\n"
            "echo '--spec-type --spec-draft-n-max --spec-draft-model'\n"
            "[ \"$1\" = --help ] && exit 0\ntouch \"$0.started\"\n")
"""A llama-server with every flag specchat passes, not built from specchat's patched source;
it marks that it was started."""


@pytest.fixture
def hot_draft(tiny, tmp_path):
    """The tiny draft as `models optimize` makes a draft: with output_hot, which only specchat's
    patched llama.cpp loads; the original beside it in the models folder, with its record."""
    from specchat.catalog.layout import Derived, save_derived
    from specchat.optimize.hot_vocab import write_hot_draft

    models = tmp_path / "models"
    models.mkdir()
    os.link(tiny.draft, models / "tiny-draft.gguf")
    hot = models / "tiny-draft.hot.gguf"
    write_hot_draft(tiny.draft, hot, 128)
    save_derived(models, Derived(
        name=hot.stem, source="tiny-draft", source_file="tiny-draft.gguf", source_sha256="",
        source_quant="F32", layout="Q4_0", file=hot.name, size=hot.stat().st_size, sha256=""))
    return hot


def test_a_made_file_says_it_needs_specchats_llama_cpp(tiny, hot_draft):
    from specchat.catalog.gguf_file import NEEDS_HOT, needs_specchat_llama

    assert needs_specchat_llama(hot_draft) == NEEDS_HOT
    assert needs_specchat_llama(tiny.draft) == ""


@pytest.mark.parametrize("command", ["llama-server", "room"])
def test_another_llama_server_is_refused_a_file_only_specchats_loads(tiny, tmp_path, hot_draft,
                                                                     command):
    stock = tmp_path / "llama-server"
    stock.write_text(STAND_IN)
    stock.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-m", "specchat", command, "--target", str(tiny.target), "--draft",
         str(hot_draft), "--port", str(free_port())], capture_output=True, text=True,
        timeout=120, env=specchat_env(tmp_path) | {"SPECCHAT_LLAMA_SERVER": str(stock)})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "tiny-draft.hot.gguf needs specchat's build of llama.cpp" in last
    assert "unset SPECCHAT_LLAMA_SERVER" in last and "--draft the original" in last
    assert not Path(f"{stock}.started").exists()


def test_models_path_gives_llama_cpps_tools_the_file_they_load(tmp_path, hot_draft):
    done = specchat("models", "path", hot_draft.stem, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{hot_draft.parent / 'tiny-draft.gguf'}\n"
    assert "needs specchat's build of llama.cpp" in done.stderr and "tiny-draft.gguf" in done.stderr
