"""specchat against llama.cpp's own C++ loops, side by side in one run (a benchmark, not a test).

Builds `llama-bench` and `llama-speculative-simple` from the llama.cpp source that the installed
llama-cpp-python vendors, with the flags install.sh uses, then runs interleaved repeats on the
default pair:
  - specchat target-only decode tok/s  vs  llama-bench tg tok/s at the same context depth as
    specchat's prompt (`-d`), so both generate after the same number of tokens (goal >= 0.97)
  - specchat speculative decode tok/s  vs  llama-speculative-simple tok/s  (goal >= 0.95)
    at the same k, prompt and greedy sampling, acceptance rates side by side.
Ratios are taken per repeat (each pair runs back to back) and the median is reported.

    .venv/bin/python -m benchmarks.vs_llamacpp --repeats 5 --tokens 128 --k 3 --out docs/benchmark.md
"""

from __future__ import annotations

import statistics
import sys

import llama_cpp

from benchmarks import arguments
from benchmarks.tools import ToolRun, build_tools, llama_bench, machine_line, publish, speculative_simple
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import turn_of
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.sampling import SamplingParams
from specchat.loading import load_drafter, load_target

PROMPT = ("Write a Python module that implements a binary search tree with insert, delete, "
          "search and in-order traversal. Give every method a docstring.")


def specchat_run(engine: SpeculativeEngine, ids: list[int], n: int) -> ToolRun:
    turn = turn_of(engine.generate(ids, GenerationSettings(max_tokens=n)))
    return ToolRun(turn.counts.tokens_per_second or 0.0, turn.counts.acceptance_rate)


def main() -> int:
    args = arguments.parser(__doc__, arguments.CPU_ONLY, repeats=5, tokens=128, k=3,
                            out=None).parse_args()
    options = arguments.settings(args).models
    threads = arguments.threads(options)

    bin_dir = build_tools()
    greedy = SamplingParams()
    target = load_target(options.target, options)
    plain = SpeculativeEngine(target, NoDrafter(), greedy)
    drafter = load_drafter(options.draft, target, greedy, plain.rng, options)
    assert drafter.model is not None
    target_path, draft_path = target.path, drafter.model.path
    text = target.render_chat([("user", PROMPT)])
    ids = target.tokenize(text)
    spec = SpeculativeEngine(target, drafter, greedy, DraftSettings(k=args.k))
    specchat_run(spec, ids, 8)  # warm both models' caches and pages

    rows: dict[str, list[ToolRun]] = {k: [] for k in ("bench", "plain", "simple", "spec")}
    for r in range(args.repeats):
        rows["bench"].append(llama_bench(bin_dir, target_path, args.tokens, len(ids), threads))
        rows["plain"].append(specchat_run(plain, ids, args.tokens))
        rows["simple"].append(speculative_simple(bin_dir, target_path, draft_path, text,
                                                 args.tokens, args.k, threads))
        rows["spec"].append(specchat_run(spec, ids, args.tokens))
        print(f"repeat {r + 1}/{args.repeats}: " + ", ".join(
            f"{k} {v[-1].tok_s:.2f}" for k, v in rows.items()), file=sys.stderr)

    def med(key: str) -> float:
        return statistics.median(x.tok_s for x in rows[key])

    def ratio(a: str, b: str) -> float:
        return statistics.median(x.tok_s / y.tok_s for x, y in zip(rows[a], rows[b]))

    def acc(key: str) -> str:
        return f"{statistics.median(x.acceptance or 0.0 for x in rows[key]):.1%}"

    table = "\n".join([
        f"{machine_line()}. Default pair ({target_path.name} + {draft_path.name}), {args.tokens} greedy tokens, "
        f"k={args.k}, {threads} threads, llama-cpp-python {llama_cpp.__version__}, "
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
    publish(table, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
