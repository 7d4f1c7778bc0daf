"""The inner loop of the AVX2 four-row Q4_0 GEMM alone: what a verify pass's matrix products
cost without the rest of llama.cpp, and what a variant of that loop would change (a benchmark,
not a test; seconds a build, not a wheel rebuild and a side-by-side run of two libraries).

    .venv/bin/python -m benchmarks.rows_dot
    .venv/bin/python -m benchmarks.rows_dot --variants benchmarks/kernels/prebroadcast.inc
    .venv/bin/python -m benchmarks.rows_dot --mca znver3

The loop (`q4_0x8_rows_dot` and its helpers) is read from the patched vendored source
(patches/llama.cpp/0001 and 0005) and built into benchmarks/kernels/rows_dot_harness.cpp with
install.sh's AVX2 flags; each variant in benchmarks/kernels/ defines the loop again over the
same helpers. Every binary runs with 1 and 2 threads, on weights that fit the L2 cache
(64 groups of eight 1536-wide columns, 442 KB) and on weights streamed from memory (16,384
groups, 113 MB), in a rotating order; each run is the best of five passes over its groups, and
the table gives the medians of --repeats runs. A variant that computes the same products on
the same layout must print the original's checksum (one thread, L2).

With --mca CPU, LLVM's machine-code analyser (llvm-mca) also reads each build's hottest loop
(the innermost one with the most vpmaddubsw) as that CPU's scheduling model sees it: the
cycles and micro-ops a row-block takes, and the busiest pipes' share of them.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from specchat.native import llama_tools

KERNELS = Path(__file__).with_name("kernels")
HARNESS = KERNELS / "rows_dot_harness.cpp"
FLAGS = ["-O3", "-mavx2", "-mfma", "-mf16c", "-mbmi2", "-std=c++17", "-fopenmp"]
"""install.sh's instruction sets on an AVX2 machine (GGML_AVX2, FMA, F16C, BMI2)."""
MCA_ITERATIONS = 200
SIZES = {"L2": (64, 2000), "memory": (16384, 8)}
"""Working set -> (groups of eight columns, passes over them a run)."""
HELPERS_START = "// 8 * the sum of each row's 32 activations"
LOOP_START = "// One repacked group of eight Q4_0 columns"
LOOP_END = "// GEMM for Q4_0 x Q8_0 four rows"


def patched_loop() -> tuple[str, str]:
    """(the helpers, the row loop) as the patched vendored x86 repack.cpp has them."""
    source = (llama_tools.llama_source() / "ggml/src/ggml-cpu/arch/x86/repack.cpp").read_text()
    try:
        start, loop, end = (source.index(m) for m in (HELPERS_START, LOOP_START, LOOP_END))
    except ValueError:
        raise SystemExit("the vendored repack.cpp lacks specchat's patches 0001 and 0005") from None
    return source[start:loop], source[loop:end]


def build(kernel: Path, workdir: Path, *more: str, suffix: str = "") -> Path:
    """The harness built around `kernel` (`more`: g++ flags beyond install.sh's); a
    `// harness: FLAGS` line in it adds FLAGS."""
    extra = [f for line in kernel.read_text().splitlines() if line.startswith("// harness:")
             for f in line.split(":", 1)[1].split()]
    out = workdir / (kernel.stem + suffix)
    subprocess.run(["g++", *FLAGS, *extra, *more, f"-I{workdir}", f'-DKERNEL="{kernel}"',
                    str(HARNESS), "-o", str(out)], check=True)
    return out


def hottest_loop(asm: str) -> str:
    """The instructions of the innermost loop in `asm` (GNU assembler) with the most vpmaddubsw:
    the lines from a label to the jump back to it, with no other label between (llvm-mca reads
    a block as straight-line code)."""
    lines = asm.splitlines()
    best, best_count = "", -1
    for i, line in enumerate(lines):
        if not re.match(r"^\.L\w+:$", line):
            continue
        label = line[:-1]
        for j in range(i + 1, len(lines)):
            if re.match(rf"^\s+j\w+\s+{re.escape(label)}$", lines[j]):
                if any(re.match(r"^\.L\w+:$", x) for x in lines[i + 1:j]):
                    break
                body = [x for x in lines[i + 1:j + 1] if not re.match(r"^\s*\.", x)]
                count = sum("vpmaddubsw" in x for x in body)
                if count > best_count:
                    best, best_count = "\n".join(body), count
                break
    return best


def mca(kernel: Path, workdir: Path, cpu: str) -> str:
    """llvm-mca's summary and busiest pipes for the hottest loop of `kernel`'s build."""
    tool = shutil.which("llvm-mca") or shutil.which("llvm-mca-14")
    if tool is None:
        raise SystemExit("--mca needs llvm-mca (apt: llvm)")
    asm = build(kernel, workdir, "-S", suffix=".s")
    loop = workdir / f"{kernel.stem}.loop.s"
    loop.write_text(hottest_loop(asm.read_text()) + "\n")
    out = subprocess.run([tool, f"-mcpu={cpu}", f"-iterations={MCA_ITERATIONS}", "-resource-pressure",
                          "-timeline=false", str(loop)], check=True, text=True,
                         capture_output=True).stdout
    summary = dict(re.findall(r"^(Instructions|Total Cycles|Total uOps):\s+(\S+)", out, re.M))
    resources = dict(re.findall(r"^\[(\S+)\]\s+-\s+(\S+)$", out, re.M))
    pressure = out.split("Resource pressure per iteration:")[1].splitlines()
    heads, values = pressure[1].split(), pressure[2].split()
    busiest = sorted(((float(v), resources.get(h.strip("[]"), h)) for h, v in zip(heads, values)
                      if v != "-"), reverse=True)[:5]
    # eight vpmaddubsw make one row-block: a row against a repacked block of eight columns
    row_blocks = loop.read_text().count("vpmaddubsw") / 8 * MCA_ITERATIONS
    per = {k: float(v) / row_blocks for k, v in summary.items()}
    return (f"{kernel.stem}: {per['Total Cycles']:.1f} cycles a row-block, "
            f"{per['Total uOps']:.1f} uops; busiest pipes a row-block: "
            + ", ".join(f"{name} {cycles * MCA_ITERATIONS / row_blocks:.1f}"
                        for cycles, name in busiest))


def run(binary: Path, threads: int, size: str) -> tuple[float, str]:
    """(ns a row-block, checksum) of one run."""
    groups, passes = SIZES[size]
    done = subprocess.run([str(binary), str(groups), str(passes)], check=True, text=True,
                          capture_output=True, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    ns, checksum = done.stdout.split()
    return float(ns), checksum


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n\n")[0])
    ap.add_argument("--variants", type=Path, nargs="*",
                    default=sorted(p for p in KERNELS.glob("*.inc")),
                    help="files defining the loop again (default: every .inc in benchmarks/kernels)")
    ap.add_argument("--mca", metavar="CPU",
                    help="also read each build's hottest loop with llvm-mca for this CPU model "
                         "(e.g. znver3)")
    ap.add_argument("--repeats", type=int, default=5,
                    help="runs of each, in a rotating order; medians are reported (default: 5)")
    args = ap.parse_args()
    helpers, loop = patched_loop()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "helpers.inc").write_text(helpers)
        (work / "patched.inc").write_text(helpers + loop)
        kernels = [work / "patched.inc", *(p.resolve() for p in args.variants)]
        binaries = {k.stem: build(k, work) for k in kernels}
        if args.mca:
            for kernel in kernels:
                print(mca(kernel, work, args.mca))
            print()
        cases = [(threads, size) for threads in (1, 2) for size in SIZES]
        times: dict[tuple[str, int, str], list[float]] = {}
        sums: dict[str, set[str]] = {name: set() for name in binaries}
        names = list(binaries)
        for r in range(args.repeats):
            for threads, size in cases:
                for name in names[r % len(names):] + names[:r % len(names)]:
                    ns, checksum = run(binaries[name], threads, size)
                    times.setdefault((name, threads, size), []).append(ns)
                    if (threads, size) == cases[0]:  # float sums follow the threads' split
                        sums[name].add(checksum)
    heads = [f"{t} thread{'s' * (t > 1)}, {size}" for t, size in cases]
    print(f"ns a row-block (256 multiply-adds), medians of {args.repeats}; a variant's ratio "
          "to the patched loop in brackets\n")
    print("| loop | " + " | ".join(heads) + " | checksum |")
    print("|---" * (len(heads) + 2) + "|")
    for name in names:
        cells = []
        for threads, size in cases:
            ns = statistics.median(times[(name, threads, size)])
            base = statistics.median(times[("patched", threads, size)])
            cells.append(f"{ns:.3f}" + ("" if name == "patched" else f" ({ns / base:.2f})"))
        print(f"| {name} | " + " | ".join(cells) + f" | {', '.join(sorted(sums[name]))} |")


if __name__ == "__main__":
    main()
