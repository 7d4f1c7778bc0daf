"""Where a verify pass spends its time, kernel by kernel: the target evaluates batches of each
size in turn (logits for every row, as verification needs) while `perf` samples the process,
and the samples are split by batch size with a marker per phase (a benchmark, not a test).

    perf record -e cpu-clock -F 4000 -o /tmp/verify.perf -- \\
        .venv/bin/python -m benchmarks.verify_profile --target default --sizes 1,4,5 --repeats 60
    .venv/bin/python -m benchmarks.verify_profile --report /tmp/verify.perf

The run prints each phase's start and end (perf's clock, CLOCK_MONOTONIC) and its ms per pass;
--report reads perf's samples back and prints, per batch size, the share of samples in each
kernel (ggml's symbols: the repacked Q4_0 GEMM/GEMV, the plain dot products, flash attention,
the quantization of the activations, the thread barrier) and its ms per pass.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import time
from pathlib import Path

from benchmarks import arguments
from specchat.engine.sampling import row_summary

PROMPT = "Write a Python module that implements a binary search tree with insert and delete."
PHASES = Path("/tmp/verify_profile_phases.json")


def run(args: argparse.Namespace) -> None:
    target, ids, base = arguments.target_at_prompt(args, PROMPT)
    tokens = (ids * 16)[:16]
    phases = []
    for n in [int(s) for s in args.sizes.split(",")]:
        for _ in range(5):  # warm this size
            target.truncate(base)
            target.eval(tokens[:n], 0)
        t0 = time.clock_gettime(time.CLOCK_MONOTONIC)
        for _ in range(args.repeats):
            target.truncate(base)
            for row in target.eval(tokens[:n], 0):
                row_summary(row)
        t1 = time.clock_gettime(time.CLOCK_MONOTONIC)
        phases.append({"n": n, "start": t0, "end": t1, "ms": (t1 - t0) * 1000 / args.repeats})
        print(f"{n} tokens: {phases[-1]['ms']:.1f} ms a pass", flush=True)
    PHASES.write_text(json.dumps(phases))


SAMPLE = re.compile(r"^\s*\S+\s+\d+\s+([\d.]+):\s+[0-9a-f]+\s+(\S*)")


def report(perf_data: Path, top: int) -> None:
    """perf's samples by phase and symbol (the first frame of each sample)."""
    phases = json.loads(PHASES.read_text())
    out = subprocess.run(["perf", "script", "-i", str(perf_data), "-F", "comm,tid,time,ip,sym"],
                         capture_output=True, text=True, check=True).stdout
    counts: dict[int, collections.Counter[str]] = {p["n"]: collections.Counter() for p in phases}
    for line in out.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        t, sym = float(m.group(1)), m.group(2) or "?"
        for p in phases:
            if p["start"] <= t <= p["end"]:
                counts[p["n"]][sym] += 1
    symbols: collections.Counter[str] = collections.Counter()
    for c in counts.values():
        symbols.update(c)
    names = [s for s, _ in symbols.most_common(top)]
    head = "| kernel | " + " | ".join(f"{p['n']} tokens: ms a pass (share)" for p in phases) + " |"
    print(head)
    print("|---" * (len(phases) + 1) + "|")
    for name in [*names, "everything else"]:
        cells = []
        for p in phases:
            c = counts[p["n"]]
            total = sum(c.values()) or 1
            n = c[name] if name != "everything else" else total - sum(c[s] for s in names)
            cells.append(f"{p['ms'] * n / total:.1f} ({n / total:.0%})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("| **whole pass** | " + " | ".join(f"{p['ms']:.1f}" for p in phases) + " |")


def main() -> int:
    ap = arguments.parser(__doc__, arguments.CPU_ONLY, repeats=60)
    ap.add_argument("--sizes", default="1,4,5", help="batch sizes, comma-separated")
    ap.add_argument("--report", type=Path, default=None, help="a perf.data of a run: its table")
    ap.add_argument("--top", type=int, default=10, help="kernels to name")
    args = ap.parse_args()
    if args.report:
        report(args.report, args.top)
    else:
        run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
