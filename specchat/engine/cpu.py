"""How much of this machine's CPU other programs took while specchat measured something.

llama.cpp's threads wait on each other every pass, so a program busy on one core can make a
turn two or three times slower, and its speedup a number nobody can stand behind. The machine's
busy time (/proc/stat, steal included) less this process's own CPU time over the same span is
what the others used; as a share of the machine's CPU time it says whether a measurement ran
on a quiet machine. Linux only: elsewhere nothing is measured (None).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
BUSY_SHARE = 0.2
"""Other programs above this share of the machine's CPU time make a measurement unreliable."""
MIN_SPAN_S = 0.5
"""Shorter spans are not judged: /proc/stat counts 10 ms ticks per core, so its rounding alone
could read as several percent of a shorter span."""


@dataclass(frozen=True)
class CpuSample:
    busy_s: float
    """Machine-wide CPU seconds not idle (every core, steal included)."""
    total_s: float
    """Machine-wide CPU seconds."""
    mine_s: float
    """This process's CPU seconds, every thread."""
    at: float
    """When it was taken (time.monotonic)."""


def sample() -> CpuSample | None:
    try:
        fields = [int(v) for v in PROC_STAT.read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal (guest time is counted in user already)
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    return CpuSample((sum(fields) - idle) / tick, sum(fields) / tick, time.process_time(),
                     time.monotonic())


def others_share(start: CpuSample | None, end: CpuSample | None) -> float | None:
    """The share of the machine's CPU time between two samples that other programs used (None
    for a span too short to judge)."""
    if start is None or end is None or end.at - start.at < MIN_SPAN_S \
            or end.total_s <= start.total_s:
        return None
    others = (end.busy_s - start.busy_s) - (end.mine_s - start.mine_s)
    return min(1.0, max(0.0, others / (end.total_s - start.total_s)))


def busy_note(share: float | None, what: str = "this reply") -> str:
    """The warning for a measurement on a busy machine; "" when it ran on a quiet one."""
    if share is None or share < BUSY_SHARE:
        return ""
    return f"other programs used {share:.0%} of the CPU during {what}: its timings are unreliable"


def _running() -> tuple[int, int] | None:
    """(tasks running on the machine now, of them this process's threads), from /proc."""
    try:
        stat = PROC_STAT.read_text()
        machine = int(next(line.split()[1] for line in stat.splitlines()
                           if line.startswith("procs_running")))
        mine = 0
        for task in Path("/proc/self/task").iterdir():
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            mine += fields[0] == "R"
        return machine, mine
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def others_running(reads: int = 5, every_s: float = 0.002) -> int | None:
    """How many of other programs' tasks are running now: the fewest over a few reads a few
    milliseconds apart, so only a load that stays counts (None where /proc cannot tell). A quiet
    machine costs one read: the first that shows none ends it."""
    fewest: int | None = None
    for i in range(reads):
        now = _running()
        if now is None:
            return None
        count = max(0, now[0] - now[1])
        fewest = count if fewest is None else min(fewest, count)
        if fewest == 0 or i + 1 == reads:  # none running: no read can show fewer
            return fewest
        time.sleep(every_s)
    return fewest


def free_cores(others: int | None, cores: int | None = None) -> int:
    """The cores other programs' running tasks leave free: all of them where unknown. A thread
    more than there are free cores makes llama.cpp's threads wait on each other at every step
    (measured here: target-only 39 tok/s on two threads, 11 with a core busy, 27 on one
    thread; in the app the wait was far worse: docs/benchmark.md)."""
    cores = cores or os.cpu_count() or 1
    if others is None:
        return cores
    return max(1, cores - others)
