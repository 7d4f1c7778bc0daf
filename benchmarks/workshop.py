"""The numbers behind README's "Running a workshop": one machine runs `specchat serve`, N tabs
connect at once, and each measures what its attendee would see.

A tab here is a websocket client speaking the page's protocol (terminal size, keys in, screen
bytes out, all read as they come), not a browser: in a room the browsers run on the attendees'
machines, so none draws here. For each N it reports the seconds until every tab had its first
screen, the memory of each tab's app process (resident and proportional set size, read from
/proc), and with `--message` the reply rate per tab: the reply's tokens over the seconds from
Enter to the reply complete in that tab's history (queueing at a shared llama-server included),
and the speedup each tab showed (with a --baseline-server, against the target alone).

    .venv/bin/python -m benchmarks.workshop --tabs 1,2,4,8 -- replay code-0.5b-draft-k3
    .venv/bin/python -m benchmarks.workshop --tabs 1,2,4,8 --message "Write a haiku." \\
        -- --server http://127.0.0.1:8080 --max-tokens 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

SIZE = {"width": 160, "height": 48}
QUIET_S = 1.5
"""A tab is ready for keys once its screen has been still this long after its first screen."""
PLAYED_S = 4.0
"""A replay has played out once its screen has been still this long (its rounds come faster)."""
SCREEN_BYTES = 10_000
"""The first screen has come when this much has (the first few bytes are the terminal set-up)."""
CHANGE_BYTES = 512
"""A screen update at least this big is a change; smaller ones are the cursor blinking."""


@dataclass
class Tab:
    first_screen_s: float | None = None
    received: int = 0
    last_change: float = 0.0
    sent_at: float = 0.0


@dataclass
class Reply:
    seconds: float
    """From Enter to the reply complete in the tab's history."""
    tokens: int
    decode_rate: float | None
    """The turn's own decode rate (its stats)."""
    speedup: float | None = None
    """The turn's speedup as the tab showed it (against the target-alone server, where the tabs
    have one)."""


@dataclass
class Round:
    tabs: int
    first_screen_s: float
    """Until the last of the tabs had its first screen."""
    played_s: float
    """Until the last tab's screen went still (a replay played out, or the reply drawn)."""
    memory_mb: list[tuple[float, float]]
    """(RSS, PSS) of each tab's app process."""
    replies: list[Reply] = field(default_factory=list)


def _replies(history: Path) -> list[tuple[str, str | None, int]]:
    try:
        with sqlite3.connect(f"file:{history}?mode=ro", uri=True, timeout=5) as db:
            return db.execute("SELECT content, stats, complete FROM messages "
                              "WHERE role = 'assistant'").fetchall()
    except sqlite3.Error:
        return []


def _memory_mb(pid: int) -> tuple[float, float]:
    """(RSS, PSS) of a process in MB."""
    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    kb = {k: int(v) for k, v in re.findall(r"^(Rss|Pss):\s+(\d+) kB", text, re.M)}
    return kb["Rss"] / 1024, kb["Pss"] / 1024


def _app_pids(serve_pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(serve_pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


async def _tab(url: str, tab: Tab, start: float, message: str | None, go: asyncio.Event,
               done: asyncio.Event) -> None:
    async with aiohttp.ClientSession() as http, http.ws_connect(
            f"{url}ws?width={SIZE['width']}&height={SIZE['height']}", max_msg_size=0) as ws:
        await ws.send_json(["resize", SIZE])

        async def read() -> None:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    now = time.monotonic()
                    tab.received += len(msg.data)
                    if tab.first_screen_s is None and tab.received >= SCREEN_BYTES:
                        tab.first_screen_s = now - start
                    if len(msg.data) >= CHANGE_BYTES:
                        tab.last_change = now

        reader = asyncio.create_task(read())
        await go.wait()
        if message:
            tab.sent_at = time.monotonic()
            await ws.send_json(["stdin", message])
            await ws.send_json(["stdin", "\r"])
        await done.wait()
        reader.cancel()


async def _round(url: str, n: int, serve_pid: int, history_dir: Path, message: str | None,
                 timeout: float) -> Round:
    before = set(history_dir.glob("tab-*.sqlite3"))
    tabs = [Tab() for _ in range(n)]
    go, done = asyncio.Event(), asyncio.Event()
    start = time.monotonic()
    tasks = [asyncio.create_task(_tab(url, t, start, message, go, done)) for t in tabs]
    deadline = start + timeout

    async def still(seconds: float) -> None:
        while time.monotonic() < deadline and not all(
                t.first_screen_s is not None and time.monotonic() - t.last_change > seconds
                for t in tabs):
            await asyncio.sleep(0.05)

    await still(QUIET_S if message else PLAYED_S)
    go.set()
    replies: list[Reply] = []
    if message:
        await asyncio.sleep(0.5)
        sent = min(t.sent_at for t in tabs)
        waiting = sorted(set(history_dir.glob("tab-*.sqlite3")) - before)
        while waiting and time.monotonic() < deadline:
            for path in list(waiting):
                complete = [r for r in _replies(path) if r[2]]
                if complete:
                    stats = json.loads(complete[-1][1] or "{}")
                    replies.append(Reply(time.monotonic() - sent, int(stats.get("n_tokens", 0)),
                                         stats.get("tokens_per_second"), stats.get("speedup")))
                    waiting.remove(path)
            await asyncio.sleep(0.05)
        await still(QUIET_S)
    memory = [_memory_mb(p) for p in _app_pids(serve_pid)]
    played = max(t.last_change for t in tabs) - start
    first = max(t.first_screen_s or float("inf") for t in tabs)
    done.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    while _app_pids(serve_pid):  # every tab's app gone before the next round
        await asyncio.sleep(0.1)
    return Round(n, first, played, memory, replies)


def _row(r: Round, message: str | None) -> str:
    rss = statistics.median(m[0] for m in r.memory_mb)
    pss = statistics.median(m[1] for m in r.memory_mb)
    cells = [str(r.tabs), f"{r.first_screen_s:.1f}", f"{r.played_s:.1f}", f"{rss:.0f}", f"{pss:.0f}"]
    if message:
        rates = [x.tokens / x.seconds for x in r.replies if x.tokens]
        decode = [x.decode_rate for x in r.replies if x.decode_rate]
        cells.append(f"{statistics.median(rates):.2f} ({min(rates):.2f}-{max(rates):.2f}), "
                     f"{len(rates)}/{r.tabs} replied" if rates else f"0/{r.tabs} replied")
        cells.append(f"{statistics.median(decode):.1f}" if decode else "–")
        last = max((x.seconds for x in r.replies), default=0.0)
        cells.append(f"{sum(x.tokens for x in r.replies) / last:.1f}" if last else "–")
        speedups = [x.speedup for x in r.replies if x.speedup]
        cells.append(f"{statistics.median(speedups):.2f}x ({min(speedups):.2f}-"
                     f"{max(speedups):.2f})" if speedups else "–")
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tabs", default="1,2,4,8", help="tab counts, one round each")
    ap.add_argument("--message", help="typed in every tab at once; the reply rate is measured")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a round may take")
    ap.add_argument("app_args", nargs=argparse.REMAINDER, help="-- what each tab runs")
    args = ap.parse_args()
    app_args = args.app_args[1:] if args.app_args[:1] == ["--"] else args.app_args
    counts = [int(n) for n in args.tabs.split(",")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve = subprocess.Popen([sys.executable, "-m", "specchat", "serve", "--port", str(port),
                              "--max-sessions", str(max(counts)), "--", *app_args],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert serve.stdout is not None
    banner = serve.stdout.readline()
    found = re.search(r"histories go to (\S+?)\. ", banner)
    if not found:
        sys.exit(f"specchat serve did not start: {banner}")
    time.sleep(1)
    print(f"tabs run: specchat {' '.join(app_args)}" + (f"; message {args.message!r}"
                                                       if args.message else ""))
    head = ["tabs", "all first screens (s)", "all still (s)", "RSS per tab (MB)",
            "PSS per tab (MB)"]
    if args.message:
        head += ["reply rate per tab, Enter to complete (tok/s, median (min-max))",
                 "in-turn decode rate (tok/s, median)",
                 "all tabs' tokens over Enter to the last reply (tok/s)",
                 "speedup each tab showed (median (min-max))"]
    print("| " + " | ".join(head) + " |\n" + "|---" * len(head) + "|", flush=True)
    try:
        for n in counts:
            result = asyncio.run(_round(f"http://127.0.0.1:{port}/", n, serve.pid,
                                        Path(found.group(1)), args.message, args.timeout))
            print(_row(result, args.message), flush=True)
    finally:
        serve.send_signal(2)
        serve.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
