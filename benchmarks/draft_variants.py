"""Cheaper drafts than the optimized one, timed side by side: its feed-forward down matrices
in a lower-bit k-quant, or some of its layers left out. A draft's layout changes only speed and
acceptance, never what the target says, so any draft may be tried; this writes each variant,
times one pass of each with llama-bench (interleaved rounds, medians), and prints the
`specchat bench` command that measures what each brings end to end (a benchmark, not a test).

    .venv/bin/python -m benchmarks.draft_variants --out /tmp/draft-variants --rounds 5

Qwen2.5-0.5B's rows are 896 wide, not a multiple of 256, so a k-quant reaches only the
feed-forward down matrices (4,864 wide); llama.cpp quantizes the rest in its fallback type.
On AVX-512 llama.cpp repacks Q2_K (ggml-cpu/repack.cpp), which made it worth timing.
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

from benchmarks.tools import llama_bench
from specchat.catalog.catalog import resolve_model
from specchat.catalog.gguf_file import copy_gguf
from specchat.catalog.layout import Layout
from specchat.native.llama_tools import build_tools
from specchat.optimize.hot_vocab import write_hot_draft
from specchat.optimize.quantize import quantize

LOW_BIT = {"q2k-down": Layout("Q2_K", 10, "q2k-down"), "q3k-down": Layout("Q3_K_S", 11, "q3k-down")}
"""llama.cpp's ftypes: MOSTLY_Q2_K and MOSTLY_Q3_K_S, pure (every matrix the type it can take)."""
DROPPED = {"drop2": {20, 21}, "drop4": {18, 19, 20, 21}}
"""Layers left out: late ones but the last, which the layer-pruning papers find the least
needed."""


def without_layers(source: Path, out: Path, layers: set[int]) -> None:
    """Write `source` to `out` without the blocks `layers`, the rest numbered on."""
    import gguf

    reader = gguf.GGUFReader(source)
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    count_key = f"{arch}.block_count"
    keep = [i for i in range(int(reader.fields[count_key].contents())) if i not in layers]
    renumber = {old: new for new, old in enumerate(keep)}
    tensors = []
    for t in reader.tensors:
        block = re.match(r"blk\.(\d+)\.(.*)", t.name)
        if block and int(block[1]) in layers:
            continue
        name = f"blk.{renumber[int(block[1])]}.{block[2]}" if block else t.name
        tensors.append((name, t.data, t.tensor_type))
    copy_gguf(reader, out, tensors, {count_key: len(keep)})


def variants(source: Path, optimized: Path, out: Path) -> dict[str, Path]:
    """The variant files, written where missing: low-bit ones from the shipped draft (with the
    optimized draft's hot vocabulary), layer-dropped ones from the optimized draft."""
    made: dict[str, Path] = {}
    for name, layout in LOW_BIT.items():
        made[name] = path = out / f"{name}.gguf"
        if not path.exists():
            raw = path.with_suffix(".raw.gguf")
            quantize(source, raw, layout)
            write_hot_draft(raw, path)
            raw.unlink()
    for name, layers in DROPPED.items():
        made[name] = path = out / f"{name}.gguf"
        if not path.exists():
            without_layers(optimized, path, layers)
    return made


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("draft-variants"))
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of timing")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    source = resolve_model("qwen2.5-coder-0.5b-instruct-q4_k_m", "draft")
    optimized = resolve_model("default", "draft")
    files = {"optimized": optimized, **variants(source, optimized, args.out)}
    bin_dir = build_tools(("llama-bench",))
    ms: dict[str, list[float]] = {name: [] for name in files}
    for _ in range(args.rounds):
        for name, path in files.items():
            ms[name].append(1000 / llama_bench(bin_dir, path, 32, 0, 2).tok_s)
    print("| draft | ms a pass (median) | per round | against the optimized |")
    print("|---|---|---|---|")
    base = statistics.median(ms["optimized"])
    for name, times in ms.items():
        mid = statistics.median(times)
        print(f"| {name} | {mid:.2f} | {', '.join(f'{t:.1f}' for t in times)} | {mid / base:.2f} |")
    drafters = ",".join(["default", *(str(p) for n, p in files.items() if n != "optimized")])
    print(f"\nend to end: specchat bench --target default --drafters {drafters} --k 3 "
          "--categories code,long --repeats 2")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
