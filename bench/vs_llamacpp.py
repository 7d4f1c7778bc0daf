"""specchat against llama.cpp's own C++ loops, side by side in one run (a benchmark, not a test).

Builds `llama-bench` and `llama-speculative-simple` from the llama.cpp source that the installed
llama-cpp-python vendors, with the flags install.sh uses, then runs interleaved repeats on the
default pair:
  - specchat target-only decode tok/s  vs  llama-bench tg tok/s at the same context depth as
    specchat's prompt (`-d`), so both generate after the same number of tokens (goal >= 0.97)
  - specchat speculative decode tok/s  vs  llama-speculative-simple tok/s  (goal >= 0.95)
    at the same k, prompt and greedy sampling, acceptance rates side by side.
Ratios are taken per repeat (each pair runs back to back) and the median is reported.

    .venv/bin/python bench/vs_llamacpp.py --repeats 5 --tokens 128 --k 3 --out docs/benchmark.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

from specchat.backends.llamacpp import LlamaCppBackend
from specchat.catalog.catalog import resolve_model
from specchat.engine.drafters import ModelDrafter, NoDrafter
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.sampling import SamplingParams

ROOT = Path(__file__).resolve().parents[1]
PROMPT = ("Write a Python module that implements a binary search tree with insert, delete, "
          "search and in-order traversal. Give every method a docstring.")
TOOLS = ("llama-bench", "llama-speculative-simple")


def llama_source() -> Path:
    """The vendored llama.cpp of the installed llama-cpp-python's sdist, unpacked once."""
    version = llama_cpp.__version__
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specchat"
    src = cache / "llama.cpp" / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if not (src / "CMakeLists.txt").exists():
        dl = cache / "src"
        sdist = dl / f"llama_cpp_python-{version}.tar.gz"
        if not sdist.exists():
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                            ":all:", f"llama-cpp-python=={version}", "-d", str(dl)], check=True)
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name]
            tar.extractall(cache / "llama.cpp", members=members, filter="data")
    return src


def build_tools(src: Path) -> Path:
    build = src / "build"
    if all((build / "bin" / t).exists() for t in TOOLS):
        return build / "bin"
    flags = subprocess.run([str(ROOT / "install.sh"), "--print-cmake-args"], check=True,
                           capture_output=True, text=True).stdout.split()
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), *flags,
                    "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_OPENSSL=OFF"], check=True)
    subprocess.run(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2), "--target",
                    *TOOLS], check=True)
    return build / "bin"


def write_section(path: Path, table: str) -> None:
    """Put `table` after the `<!-- bench -->` line of a doc (the whole file if it has none)."""
    head = path.read_text().split("<!-- bench -->")[0] if path.exists() else ""
    path.write_text(head + "<!-- bench -->\n" + table + "\n" if head else table + "\n")


@dataclass
class Run:
    tok_s: float
    acceptance: float | None = None
    tokens: int = 0
    seconds: float = 0.0


def llama_bench(bin_dir: Path, target: Path, n: int, depth: int, threads: int) -> Run:
    """tg`n` at context depth `depth`: generation after as many tokens as specchat's prompt."""
    out = subprocess.run([str(bin_dir / "llama-bench"), "-m", str(target), "-p", "0", "-n", str(n),
                          "-d", str(depth), "-t", str(threads), "-r", "1", "-ngl", "0",
                          "-o", "json"],
                         check=True, capture_output=True, text=True).stdout
    return Run(float(json.loads(out)[0]["avg_ts"]))


def speculative_simple(bin_dir: Path, target: Path, draft: Path, prompt: str, n: int, k: int,
                       threads: int) -> Run:
    proc = subprocess.run(
        [str(bin_dir / "llama-speculative-simple"), "-m", str(target), "-md", str(draft),
         "--spec-type", "draft-simple", "-p", prompt, "-n", str(n), "--spec-draft-n-max", str(k),
         "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "--temp", "0", "-t", str(threads),
         "-c", "4096", "-ngl", "0", "-ngld", "0", "--seed", "1"],
        check=True, capture_output=True, text=True)
    log = proc.stderr + proc.stdout
    decoded = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+)", log)
    accept = float(re.search(r"accept\s+=\s+([\d.]+)%", log)[1]) / 100
    return Run(float(decoded[3]), accept, int(decoded[1]), float(decoded[2]))


def specchat_run(engine: SpeculativeEngine, ids: list[int], n: int) -> Run:
    turn = list(engine.generate(ids, GenerationSettings(max_tokens=n)))[-1]
    return Run(turn.tokens_per_second, turn.acceptance_rate)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--out", type=Path, default=None, help="write the markdown table here too")
    args = ap.parse_args()

    bin_dir = build_tools(llama_source())
    target_path, draft_path = resolve_model("default", "target"), resolve_model("default", "draft")
    target = LlamaCppBackend(target_path, n_threads=args.threads, n_gpu_layers=0)
    draft = LlamaCppBackend(draft_path, n_threads=args.threads, n_gpu_layers=0)
    greedy = SamplingParams()
    text = target.render_chat([("user", PROMPT)])
    ids = target.tokenize(text)
    plain = SpeculativeEngine(target, NoDrafter(), greedy)
    spec = SpeculativeEngine(target, ModelDrafter(draft, greedy, plain.rng), greedy,
                             DraftSettings(k=args.k))
    specchat_run(spec, ids, 8)  # warm both models' caches and pages

    rows: dict[str, list[Run]] = {k: [] for k in ("bench", "plain", "simple", "spec")}
    for r in range(args.repeats):
        rows["bench"].append(llama_bench(bin_dir, target_path, args.tokens, len(ids), args.threads))
        rows["plain"].append(specchat_run(plain, ids, args.tokens))
        rows["simple"].append(speculative_simple(bin_dir, target_path, draft_path, text,
                                                 args.tokens, args.k, args.threads))
        rows["spec"].append(specchat_run(spec, ids, args.tokens))
        print(f"repeat {r + 1}/{args.repeats}: " + ", ".join(
            f"{k} {v[-1].tok_s:.2f}" for k, v in rows.items()), file=sys.stderr)

    def med(key: str) -> float:
        return statistics.median(x.tok_s for x in rows[key])

    def ratio(a: str, b: str) -> float:
        return statistics.median(x.tok_s / y.tok_s for x, y in zip(rows[a], rows[b]))

    def acc(key: str) -> str:
        return f"{statistics.median(x.acceptance for x in rows[key]):.1%}"

    table = "\n".join([
        f"Default pair ({target_path.name} + {draft_path.name}), {args.tokens} greedy tokens, "
        f"k={args.k}, {args.threads} threads, llama-cpp-python {llama_cpp.__version__}, "
        f"{args.repeats} interleaved repeats (medians; ratios are medians of per-repeat ratios).",
        "",
        "| measurement | specchat tok/s | llama.cpp tok/s | ratio | goal | acceptance (specchat / llama.cpp) |",
        "|---|---|---|---|---|---|",
        f"| target only vs `llama-bench` tg{args.tokens} @ depth {len(ids)} | {med('plain'):.2f} "
        f"| {med('bench'):.2f} "
        f"| {ratio('plain', 'bench'):.3f} | >= 0.97 | |",
        f"| speculative vs `llama-speculative-simple` | {med('spec'):.2f} | {med('simple'):.2f} "
        f"| {ratio('spec', 'simple'):.3f} | >= 0.95 | {acc('spec')} / {acc('simple')} |",
        "",
        f"Speculative over target-only: specchat {ratio('spec', 'plain'):.3f}x, "
        f"llama.cpp {ratio('simple', 'bench'):.3f}x.",
        "",
        "Per-repeat ratios (the spread is the machine's noise): target only "
        + ", ".join(f"{x.tok_s / y.tok_s:.2f}" for x, y in zip(rows["plain"], rows["bench"]))
        + "; speculative "
        + ", ".join(f"{x.tok_s / y.tok_s:.2f}" for x, y in zip(rows["spec"], rows["simple"]))
        + ".",
    ])
    print(table)
    if args.out:
        write_section(args.out, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
