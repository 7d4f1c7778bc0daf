"""What drawing costs generation in a real terminal (a benchmark, not a test). The app runs in
tmux, so its screen goes out as escape codes as a user's does; a message is sent as a paste
arrives (the text and Enter in one `send-keys`), and two things are read: the reply's decode
rate from the stats it saved (a scratch history), and the CPU seconds the app's UI thread used
from Enter to the saved reply (/proc), a second of that time. On two cores what the UI thread
draws is taken from llama.cpp's threads; its share is less noisy than the rates.

With --against REV the app as it was at that git revision (a worktree) runs in turn with the
working tree's, same prompt and settings, the order alternating: side by side in one run.

    .venv/bin/python -m benchmarks.tui_in_terminal --against c78a437 --repeats 3 --tokens 900
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import arguments
from specchat.chat.history import HISTORY_ENV, HistoryStore

PROMPT = ("Write a complete Python module implementing a red-black tree with insert, delete, "
          "search, iteration and docstrings, followed by pytest tests for every method.")
SESSION = "specchat-tui-bench"
SIZE = ("160", "48")
READY_S = 120.0


@dataclass
class Reply:
    tokens: int
    tokens_per_second: float
    ui_share: float
    """CPU seconds of the app's UI thread a second of the reply."""


def ui_thread_ticks(pid: int) -> int:
    """User and system clock ticks of the process's main thread (its UI thread)."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def saved_reply(store: HistoryStore) -> dict | None:
    """The stats of the reply saved whole, once there is one (the scratch history holds one)."""
    for conversation in store.conversations():
        for message in store.messages(conversation.id):
            if message.stats and message.complete:
                return message.stats
    return None


def one_reply(source: Path, tokens: int, k: int) -> Reply:
    """Open the app of `source` in tmux, wait until it is ready, send PROMPT, and read."""
    history = Path(tempfile.mkdtemp()) / "history.sqlite3"
    store = HistoryStore(history)
    command = (f"cd {source} && exec env {HISTORY_ENV}={history} {sys.executable} -m specchat "
               f"--max-tokens {tokens} --k {k}")
    tmux("new-session", "-d", "-s", SESSION, "-x", SIZE[0], "-y", SIZE[1], command)
    try:
        pid = int(tmux("list-panes", "-t", SESSION, "-F", "#{pane_pid}").split()[0])
        deadline = time.monotonic() + READY_S
        while "loading" in (screen := tmux("capture-pane", "-p", "-t", SESSION)) or (
                "Send" not in screen):
            if time.monotonic() > deadline:
                raise SystemExit(f"the app of {source} was not ready in {READY_S:.0f} s")
            time.sleep(0.5)
        time.sleep(2.0)  # the warm-up turn ends and the screen settles
        ticks, t0 = ui_thread_ticks(pid), time.perf_counter()
        tmux("send-keys", "-t", SESSION, PROMPT, "Enter")
        while (stats := saved_reply(store)) is None:
            time.sleep(0.1)
        share = (ui_thread_ticks(pid) - ticks) / os.sysconf("SC_CLK_TCK") / (
            time.perf_counter() - t0)
        return Reply(stats["n_tokens"], stats["tokens_per_second"], share)
    finally:
        tmux("kill-session", "-t", SESSION)
        store.close()


def main() -> int:
    ap = arguments.parser(__doc__, None, repeats=3, tokens=900, k=3)
    ap.add_argument("--against", help="also run the app as it was at this git revision")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is not installed")
    sources = {"this tree": Path.cwd()}
    if args.against:
        worktree = Path(tempfile.mkdtemp()) / "against"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(worktree), args.against],
                       check=True)
        sources[args.against] = worktree
    replies: dict[str, list[Reply]] = {name: [] for name in sources}
    try:
        for r in range(args.repeats):
            order = list(sources)[r % len(sources):] + list(sources)[:r % len(sources)]
            for name in order:
                reply = one_reply(sources[name], args.tokens, args.k)
                replies[name].append(reply)
                print(f"repeat {r + 1}, {name}: {reply.tokens} tokens at "
                      f"{reply.tokens_per_second:.2f} tok/s, UI thread {reply.ui_share:.1%} of a "
                      "core", flush=True)
    finally:
        if args.against:
            subprocess.run(["git", "worktree", "remove", "--force", str(sources[args.against])],
                           check=False)
    for name, got in replies.items():
        print(f"{name}: median {statistics.median(r.tokens_per_second for r in got):.2f} tok/s, "
              f"UI thread median {statistics.median(r.ui_share for r in got):.1%} of a core")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
