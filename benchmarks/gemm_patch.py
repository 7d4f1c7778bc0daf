"""What specchat's llama.cpp patches (patches/llama.cpp) change, side by side in one run: the
target's verify passes (logits for every row), or with --last-row a prompt's, timed with
llama.cpp built from the unpatched source (or with every patch but those --without names) and
with the installed wheel (built with the patches), in turn, and whether the two give the same
bits (a benchmark, not a test; medians of --repeats runs of each, each run a median of five
passes per size).

    .venv/bin/python -m benchmarks.gemm_patch --target default --repeats 5
    .venv/bin/python -m benchmarks.gemm_patch --target default --repeats 5 --without 0008
    .venv/bin/python -m benchmarks.gemm_patch --target default --repeats 5 --without 0008 --threads 1
    .venv/bin/python -m benchmarks.gemm_patch --target default --repeats 5 --without 0008 \
        --sizes 8,16,32,64,128,256 --last-row      # a prompt's passes

A patch that a later one builds on cannot be left out alone (0004-0006 without 0008: the
build says which does not apply).

The libraries of the other side are built once (libllama and ggml only, install.sh's flags, a
few minutes) from the same sdist in ~/.cache/specchat/llama.cpp/unpatched (or without-NNNN-KEY,
KEY that of the patches it has); each side runs in its own process, that one through
llama-cpp-python's LLAMA_CPP_LIB_PATH.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import arguments
from specchat.native import llama_tools

SIZES = (1, 2, 3, 4, 5, 8, 9, 12)
PROMPT = "Write a Python module that implements a binary search tree with insert and delete."


def before_libraries(version: str, without: list[str]) -> Path:
    """That folder, unpacking and building the libraries first where they are not there."""
    src = llama_tools.before_source(version, without)
    if not (src / "CMakeLists.txt").exists():
        llama_tools.unpack(version, src.parents[2], patched=bool(without), leave_out=without)
    if (built := llama_tools.built_before(version, without)) is None:
        print(f"building the {src.parents[2].name} llama.cpp libraries once (a few minutes)",
              file=sys.stderr)
        llama_tools.cmake_build(src, ("llama",))
        built = src / "build" / "bin"
    return built


def measure(args: argparse.Namespace) -> dict:
    """One side's run: ms a pass per size (median of five), and a digest of the logits of every
    row (or of the last, with --last-row)."""
    target, ids, base = arguments.target_at_prompt(args, PROMPT)
    tokens = (ids * (max(args.sizes) // len(ids) + 1))[:max(args.sizes)]
    digest = hashlib.sha256()
    ms, each = {}, {}
    for n in args.sizes:
        times = []
        for _ in range(5):
            target.truncate(base)
            t0 = time.perf_counter()
            rows = target.eval(tokens[:n], n - 1 if args.last_row else 0)
            times.append(time.perf_counter() - t0)
        digest.update(b"".join(row.tobytes() for row in rows))
        each[n] = hashlib.sha256(b"".join(row.tobytes() for row in rows)).hexdigest()
        ms[n] = statistics.median(times) * 1000
    return {"ms": ms, "digest": digest.hexdigest(), "digests": each}


def main() -> int:
    ap = arguments.parser(__doc__, repeats=5)
    ap.add_argument("--without", type=lambda v: [n for n in v.split(",") if n], default=[],
                    metavar="NNNN[,NNNN]",
                    help="compare against every patch but these (default: against none of them)")
    ap.add_argument("--sizes", type=lambda v: [int(n) for n in v.split(",")], default=SIZES,
                    metavar="N[,N]", help=f"tokens a pass (default: {','.join(map(str, SIZES))})")
    ap.add_argument("--last-row", action="store_true",
                    help="logits for the last row only, as a prompt's pass asks (default: for "
                         "every row, as a verify does)")
    ap.add_argument("--build", action="store_true",
                    help="build the other side's libraries (where not built yet) and stop: "
                         "install.sh --dev does, for the patch tests' bit-for-bit check")
    ap.add_argument("--side", choices=("before", "after"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        print(json.dumps(measure(args)))
        return 0
    import llama_cpp

    before = before_libraries(llama_cpp.__version__, args.without)
    if args.build:
        print(before)
        return 0
    env_before = llama_tools.before_env(before)
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for r in range(args.repeats):
        for side in (("before", "after") if r % 2 == 0 else ("after", "before")):
            out = subprocess.run([sys.executable, "-m", "benchmarks.gemm_patch", *sys.argv[1:],
                                  "--side", side], env=env_before if side == "before" else None,
                                 capture_output=True, text=True, check=True).stdout
            runs[side].append(json.loads(out.strip().splitlines()[-1]))
    sizes = args.sizes
    med = {side: {n: statistics.median(run["ms"][str(n)] for run in runs[side]) for n in sizes}
           for side in runs}
    print(f"medians of {args.repeats} runs a side, each the median of 5 passes; patches "
          f"{llama_tools.patches_key()}; before: "
          + (f"every patch but {', '.join(args.without)}" if args.without else "none"))
    print("| tokens in the pass | " + " | ".join(map(str, sizes)) + " |")
    print("|---|" + "---|" * len(sizes))
    for side in ("before", "after"):
        print(f"| ms, {side} | " + " | ".join(f"{med[side][n]:.0f}" for n in sizes) + " |")
    for side in ("before", "after"):
        print(f"| ms a token, {side} | "
              + " | ".join(f"{med[side][n] / n:.2f}" for n in sizes) + " |")
    if 1 in sizes:
        for side in ("before", "after"):
            print(f"| single steps, {side} | "
                  + " | ".join(f"{med[side][n] / med[side][1]:.2f}" for n in sizes) + " |")
    print("| after / before | " + " | ".join(f"{med['after'][n] / med['before'][n]:.2f}"
                                             for n in sizes) + " |")
    digests = {run["digest"] for side in runs for run in runs[side]}
    print("logits of every pass the same bits before and after: "
          + ("yes" if len(digests) == 1 else f"no ({len(digests)} digests)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
