"""What drawing costs generation in a real terminal (a benchmark, not a test). The app runs in
tmux, so its screen goes out as escape codes as a user's does; a message is sent as a paste
arrives (the text and Enter in one `send-keys`), and two things are read: the reply's decode
rate from the stats it saved (a scratch history), and the CPU seconds the app's UI thread used
from Enter to the saved reply (/proc), a second of that time. On two cores what the UI thread
draws is taken from llama.cpp's threads; its share is less noisy than the rates.

With --against REV the app as it was at that git revision (a worktree) runs in turn with the
working tree's, same prompt and settings, the order alternating: side by side in one run.
With --target-only the working tree's app also runs with `--draft none` each repeat, and each
speculative reply's speedup on screen is set beside its rate over the target-only reply's of
the same repeat: what the speedup claims against what the app did.

    .venv/bin/python -m benchmarks.tui_in_terminal --against c78a437 --repeats 3 --tokens 900
    .venv/bin/python -m benchmarks.tui_in_terminal --against 9597637 --target-only --tokens 300
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
    speedup: float | None
    """The speedup the app showed for the reply (None for a target-only reply)."""


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


def one_reply(source: Path, tokens: int, k: int, draft: str = "") -> Reply:
    """Open the app of `source` in tmux (with `--draft draft` where one is named, else the
    app's own default), wait until it is ready, send PROMPT, and read."""
    history = Path(tempfile.mkdtemp()) / "history.sqlite3"
    store = HistoryStore(history)
    command = (f"cd {source} && exec env {HISTORY_ENV}={history} {sys.executable} -m specchat "
               f"--max-tokens {tokens} --k {k}" + (f" --draft {draft}" if draft else ""))
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
        speedup = stats["speedup"] if draft != "none" else None
        return Reply(stats["n_tokens"], stats["tokens_per_second"], share, speedup)
    finally:
        tmux("kill-session", "-t", SESSION)
        store.close()


def main() -> int:
    ap = arguments.parser(__doc__, None, repeats=3, tokens=900, k=3)
    ap.add_argument("--against", help="also run the app as it was at this git revision")
    ap.add_argument("--target-only", action="store_true",
                    help="also run this tree's app with --draft none, and set each speedup on "
                         "screen beside the rate over that reply's")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is not installed")
    sources = {"this tree": Path.cwd()}
    if args.against:
        worktree = Path(tempfile.mkdtemp()) / "against"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(worktree), args.against],
                       check=True)
        sources[args.against] = worktree
    runs = [(name, source, "") for name, source in sources.items()]
    if args.target_only:
        runs.append((TARGET_ONLY, Path.cwd(), "none"))
    replies: dict[str, list[Reply]] = {name: [] for name, _, _ in runs}
    try:
        for r in range(args.repeats):
            for name, source, draft in runs[r % len(runs):] + runs[:r % len(runs)]:
                reply = one_reply(source, args.tokens, args.k, draft)
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
    if args.target_only:
        print_claims(replies)
    return 0


TARGET_ONLY = "target only"


def print_claims(replies: dict[str, list[Reply]]) -> None:
    """Each speculative reply's speedup on screen beside its rate over the target-only reply
    of its repeat, and the median of their ratio (1: the screen says what the app did)."""
    alone = replies[TARGET_ONLY]
    print("\n| app | speedup on screen | its rate over the target-only app's | ratio |")
    print("|---|---|---|---|")
    for name, got in replies.items():
        if name == TARGET_ONLY:
            continue
        ratios = []
        for reply, base in zip(got, alone):
            did = reply.tokens_per_second / base.tokens_per_second
            shown = f"{reply.speedup:.2f}x" if reply.speedup else "–"
            ratio = reply.speedup / did if reply.speedup else None
            if ratio is not None:
                ratios.append(ratio)
            print(f"| {name} | {shown} | {did:.2f}x | {ratio:.2f} |" if ratio is not None
                  else f"| {name} | {shown} | {did:.2f}x | – |")
        if ratios:
            print(f"| {name}, median | | | {statistics.median(ratios):.2f} |")


if __name__ == "__main__":
    raise SystemExit(main())
