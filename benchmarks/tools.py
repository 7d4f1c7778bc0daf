"""llama.cpp's own tools beside specchat (built by specchat.native.llama_tools), their results parsed;
and the one helper that writes a benchmark's table into a doc.

    python -m benchmarks.tools llama-server     build the named tools, print where they are
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from specchat.native.llama_tools import TOOLS, build_tools

ROOT = Path(__file__).resolve().parents[1]


def machine_line() -> str:
    """Where a table was measured: the date, the CPU's name, its cores and the x86 kernels this
    llama.cpp build runs (what decides whether speculation pays on a CPU)."""
    import datetime
    import os
    import platform

    from specchat.backends.llamacpp import system_info
    from specchat.catalog.layout import system_flags

    name = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name")), name)
    flags = system_flags(system_info()[0])
    kernels = "AVX-512" if flags.get("AVX512") else "AVX2" if flags.get("AVX2") else "no AVX2"
    return f"{datetime.date.today()}, {name}, {os.cpu_count()} cores, {kernels}"


def publish(table: str, doc: Path | None) -> None:
    """Print a benchmark's table and, given a doc, put it there (see `write_section`)."""
    print(table)
    if doc:
        write_section(doc, table)


def write_section(path: Path, table: str) -> None:
    """Put `table` after the `<!-- bench -->` line of a doc (the whole file if it has none)."""
    head = path.read_text().split("<!-- bench -->")[0] if path.exists() else ""
    path.write_text(head + "<!-- bench -->\n" + table + "\n" if head else table + "\n")


@dataclass
class ToolRun:
    """What one run of a llama.cpp tool (or of specchat beside it) measured."""

    tok_s: float
    acceptance: float | None = None
    tokens: int = 0
    seconds: float = 0.0


def llama_bench(bin_dir: Path, target: Path, n: int, depth: int, threads: int,
                ngl: int = 0) -> ToolRun:
    """tg`n` at context depth `depth`: generation after as many tokens as specchat's prompt;
    `ngl` layers on the GPU."""
    out = subprocess.run([str(bin_dir / "llama-bench"), "-m", str(target), "-p", "0", "-n", str(n),
                          "-d", str(depth), "-t", str(threads), "-r", "1", "-ngl", str(ngl),
                          "-o", "json"],
                         check=True, capture_output=True, text=True, errors="replace").stdout
    return ToolRun(float(json.loads(out)[0]["avg_ts"]))


def speculative_simple(bin_dir: Path, target: Path, draft: Path, prompt: str, n: int, k: int,
                       threads: int, ngl: int = 0) -> ToolRun:
    """llama.cpp's own draft-model loop, greedy, drafting `k` a round; `ngl` layers of each
    model on the GPU. Its statistics come from its log, which patch 0009 writes out before it
    exits (without it, 2 runs in 20 beside a busy core ended without them)."""
    proc = subprocess.run(
        [str(bin_dir / "llama-speculative-simple"), "-m", str(target), "-md", str(draft),
         "--spec-type", "draft-simple", "-p", prompt, "-n", str(n), "--spec-draft-n-max",
         str(k), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "--temp", "0", "-t",
         str(threads), "-c", "4096", "-ngl", str(ngl), "-ngld", str(ngl), "--seed", "1"],
        check=True, capture_output=True, text=True, errors="replace")
    log = proc.stderr + proc.stdout
    decoded = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+)", log)
    accepted = re.search(r"accept\s+=\s+([\d.]+)%", log)
    if decoded is None or accepted is None:
        raise RuntimeError(f"llama-speculative-simple printed no rate or acceptance:\n{log[-2000:]}")
    return ToolRun(float(decoded[3]), float(accepted[1]) / 100, int(decoded[1]), float(decoded[2]))


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Build llama.cpp's own tools from the vendored "
                                 "source (install.sh's flags) and print where they are.")
    ap.add_argument("tools", nargs="*", default=list(TOOLS),
                    help="cmake targets to build (default: %(default)s)")
    print(build_tools(tuple(ap.parse_args().tools)))
