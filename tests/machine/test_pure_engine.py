"""The engine reads nothing of the machine: no /proc, no core count, no other processes' CPU
time (the caller's MachineWatch does that: specchat/cpu.py). The import contract in
pyproject.toml keeps specchat.cpu and psutil out; this keeps the reads out that need no import."""

from __future__ import annotations

import re
from pathlib import Path

import specchat.engine

MACHINE_READS = re.compile(r"/proc|/sys/devices|cpu_count|sched_getaffinity|getloadavg|"
                           r"sysconf|\bimport os\b|\bfrom os\b|psutil")


def test_nothing_under_the_engine_reads_the_machine():
    engine = Path(specchat.engine.__file__).parent
    found = [f"{path.name}:{n}: {line.strip()}" for path in sorted(engine.glob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if MACHINE_READS.search(line)]
    assert found == []
    assert len(list(engine.glob("*.py"))) >= 10  # it looked at the engine
