"""The history as a user relies on it: a reply saved as it grows survives `kill -9` and is shown
as interrupted on the next start; a history that cannot be written never stops a chat."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time

from support.pilot import SIZE, make_app, ready, run_async, say, until
from support.processes import history_path, saved_reply, specchat, specchat_env
from support.tinymodels import TinySpec, write_tiny_gguf

from specchat.chat.history import HistoryStore
from specchat.ui.widgets.live_reply import LiveReply


def test_a_reply_cut_off_by_kill_9_is_kept_and_shown_as_interrupted(tiny, tmp_path):
    """A tiny model with a long context, so the reply runs for seconds (about a minute if left)."""
    write_tiny_gguf(tmp_path / "tiny-long.gguf", TinySpec(seed=0, n_ctx=65536))
    chat = subprocess.Popen(
        [sys.executable, "-m", "specchat", "chat", "--target", str(tmp_path / "tiny-long.gguf"),
         "--draft", "ngram", "--ctx", "65536", "--max-tokens", "60000", "--threads", "1"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=specchat_env(tmp_path))
    assert chat.stdin is not None
    chat.stdin.write("tell me everything\n")
    chat.stdin.flush()
    db = history_path(tmp_path)
    seen: list[str] = []
    deadline = time.monotonic() + 90
    while len(seen) < 2 and time.monotonic() < deadline:  # the reply saved twice as it grew
        row = saved_reply(db)
        if row and row[0] and (not seen or row[0] != seen[-1]):
            assert row[1] == 0  # marked incomplete while it grows
            seen.append(row[0])
        time.sleep(0.05)
    chat.send_signal(signal.SIGKILL)
    chat.wait(10)
    assert chat.returncode == -signal.SIGKILL and len(seen) == 2, chat.stderr.read()
    assert seen[1].startswith(seen[0])
    with sqlite3.connect(db) as check:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = HistoryStore(db)
    (conversation,) = store.interrupted()
    messages = store.messages(conversation.id)
    assert [(m.role, m.complete) for m in messages] == [("user", True), ("assistant", False)]
    assert messages[1].content.startswith(seen[1])
    assert "## assistant (interrupted)" in store.export_markdown(conversation.id)

    app = make_app(tiny, tmp_path, history=store)

    async def next_start():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            # the notice goes to the app's queue, the status line to the screen's: on a busy
            # machine the status line may come first
            await until(pilot, lambda: any("cut off" in n.message for n in app._notifications))
            await pilot.press("ctrl+o")
            await pilot.pause()
            await pilot.press("enter")
            await until(pilot, lambda: len(app.chat_screen.query(LiveReply)) == 2)
            reply = app.chat_screen.query(LiveReply).last()
            assert reply.note.startswith("interrupted")
            await say(app, pilot, "go on")  # the conversation continues
            assert len(store.messages(conversation.id)) == 4
    run_async(next_start)


def test_chat_goes_on_when_the_history_cannot_be_opened(tiny, tmp_path):
    (tmp_path / "data").write_text("a file where the data folder should be")
    proc = specchat("chat", "--target", str(tiny.target), "--draft", str(tiny.draft),
                    "--max-tokens", "8", tmp_path=tmp_path, stdin="first\nsecond\n")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "history not saved" in line]
    assert len(warnings) == 1 and "cannot be opened" in warnings[0]
    assert proc.stderr.count("tokens · draft") == 2  # both turns answered


def test_chat_goes_on_when_the_disk_fills(tiny, tmp_path):
    """A file-size limit makes the history's writes fail as a full disk does (EFBIG)."""
    limit = 48 * 1024
    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
            "from specchat.cli import main; sys.exit(main())")
    proc = subprocess.run(
        [sys.executable, "-c", code, "chat", "--target", str(tiny.target), "--draft",
         str(tiny.draft), "--max-tokens", "400"], input="one\ntwo\nthree\nfour\n",
        capture_output=True, text=True, env=specchat_env(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("tokens · draft") == 4  # every turn answered
    warnings = [line for line in proc.stderr.splitlines() if "history not saved" in line]
    assert len(warnings) == 1 and "cannot be written" in warnings[0]


def test_the_app_goes_on_when_another_process_holds_the_history(tiny, tmp_path):
    app = make_app(tiny, tmp_path)
    path = app.history.path
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys, time; db = sqlite3.connect(sys.argv[1], "
         "isolation_level=None); db.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); "
         "time.sleep(120)", str(path)], stdout=subprocess.PIPE, text=True)

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
            await say(app, pilot, "still here?")
            await say(app, pilot, "and now?")
            status = app.chat_screen.view.status_text
            assert "history not saved" in status and "database is locked" in status
            assert len(app.chat_screen.chat.session.conversation.messages) == 4
            assert len(app.history.messages(app.chat_screen.chat.conversation_id)) == 4  # kept in memory
    try:
        run_async(scenario)
    finally:
        holder.kill()
        holder.wait()
