"""This machine's CPU, read around a turn by the caller (the engine reads nothing of it itself):
how many threads a turn should run on, and how much of the CPU other programs took while it ran.

llama.cpp's threads wait on each other every pass, so a program busy on one core can make a
turn two or three times slower, and its speedup a number nobody can stand behind. The machine's
busy time (psutil's CPU times, steal included) less this process's own CPU time over the same
span is what the others used; as a share of the machine's CPU time it says whether a
measurement ran on a quiet machine. Threads: one per physical core (performance cores where
the OS tells them apart), as llama.cpp's own tools choose (SMT siblings slow its matrix
work), less the cores other programs keep busy when the turn starts (Linux's /proc tells how
many tasks run; elsewhere all of them are taken as free).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

PROC_STAT = Path("/proc/stat")
BUSY_SHARE = 0.2
"""Other programs above this share of the machine's CPU time make a measurement unreliable."""
MIN_SPAN_S = 0.5
"""Shorter spans are not judged: the kernel counts CPU time in 10 ms ticks per core, so its
rounding alone could read as several percent of a shorter span."""


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
        times = psutil.cpu_times()
    except (OSError, RuntimeError):
        return None
    total = sum(times)  # every field psutil has on this OS; guest time is in user already
    total -= getattr(times, "guest", 0.0) + getattr(times, "guest_nice", 0.0)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return CpuSample(total - idle, total, time.process_time(), time.monotonic())


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


def _performance_cores() -> int | None:
    """macOS: the performance cores of an Apple chip (its efficiency cores slow llama.cpp's
    threads down to their pace). None elsewhere, or where the OS does not say."""
    if sys.platform != "darwin":
        return None
    try:
        out = subprocess.run(["sysctl", "-n", "hw.perflevel0.physicalcpu"], capture_output=True,
                             text=True, timeout=2).stdout.strip()
        return int(out) if out.isdigit() and int(out) > 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


@functools.cache
def physical_cores() -> int | None:
    """The cores llama.cpp's threads should use: the performance cores where the OS tells them
    apart, else the physical cores; None where unknown. Read once (macOS asks sysctl, and the
    panel asks at every turn)."""
    return _performance_cores() or psutil.cpu_count(logical=False) or None


def default_threads() -> int:
    """A model's threads where the user sets none: one per physical core (llama.cpp's own
    tools' default), else one per logical core."""
    return physical_cores() or max(1, os.cpu_count() or 1)


def free_cores(others: int | None, cores: int | None) -> int | None:
    """The cores other programs' running tasks leave free, at least one; all of them where the
    others are unknown; None where the cores are (the models keep their threads). A thread
    more than there are free cores makes llama.cpp's threads wait on each other at every step
    (docs/lab/2026-12-01-threads-on-a-busy-machine.md)."""
    if cores is None:
        return None
    if others is None:
        return cores
    return max(1, cores - others)


class CpuWatch:
    """The engine's MachineWatch on this machine: before a turn, the threads the free physical
    cores allow; after it, the share of the CPU other programs used. `cores` and `running` can
    be given (a test's topology)."""

    def __init__(self, cores: Callable[[], int | None] = physical_cores,
                 running: Callable[[], int | None] = others_running,
                 clock: Callable[[], CpuSample | None] = sample) -> None:
        self.cores, self.running, self.clock = cores, running, clock
        self._start: CpuSample | None = None

    def begin(self) -> int | None:
        self._start = self.clock()
        return free_cores(self.running(), self.cores())

    def end(self) -> float | None:
        return others_share(self._start, self.clock() if self._start else None)
