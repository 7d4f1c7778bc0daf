"""The adaptive policy against fixed k and llama.cpp's own loop, over the bench prompt suite.

For each repeat and each prompt of the suite, back to back on the default pair (greedy):
  - specchat target-only, the 0.5B draft at each fixed k, the n-gram drafter and the combined
    n-gram+0.5B drafter with the adaptive policy (`specchat bench`'s runner: one engine per arm,
    empty caches before every run);
  - `llama-speculative-simple` (built from the same vendored llama.cpp) at each
    `--spec-draft-n-max`.
Totals are tokens over seconds of decoding (after the first token), per category and over the
whole suite; llama.cpp's best fixed n-max is the one with the highest suite total. Also writes
the specchat arms as `specchat bench` would (bench.json, bench.csv, bench.svg).

    .venv/bin/python -m benchmarks.policy_vs_llamacpp --repeats 1 --out docs/policy.md
"""

from __future__ import annotations

import platform
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import llama_cpp
import numpy as np

from benchmarks import arguments
from benchmarks.tools import ToolRun, build_tools, publish, speculative_simple
from specchat.bench import chart, report
from specchat.bench.runner import Arm, BenchRunner, Run, load_prompts
from specchat.choices import DraftChoice
from specchat.engine.loop import DraftSettings
from specchat.engine.policy import PolicyKind
from specchat.engine.sampling import SamplingParams
from specchat.loading import load_drafter, load_target

ADAPTIVE = "ngram+default adaptive k<=8"
NGRAM = "ngram adaptive k<=8"


@dataclass
class Simple:
    """One llama-speculative-simple run of a suite prompt."""

    category: str
    prompt: str
    n_max: int
    run: ToolRun


def rate(pairs: list[tuple[int, float]]) -> float:
    return sum(t for t, _ in pairs) / sum(s for _, s in pairs)


def main() -> int:
    ap = arguments.parser(__doc__, arguments.CPU_ONLY, repeats=1, categories="", out=None)
    ap.add_argument("--k", default="2,3,4", help="specchat's fixed k with the 0.5B draft")
    ap.add_argument("--n-max", default="2,3,4", help="llama-speculative-simple's n-max values")
    ap.add_argument("--results", type=Path, default=Path("bench-results"))
    args = ap.parse_args()
    options = arguments.settings(args).models
    threads = arguments.threads(options)

    bin_dir = build_tools()
    prompts = load_prompts(None, arguments.categories(args))
    ks, n_maxes = [int(k) for k in args.k.split(",")], [int(n) for n in args.n_max.split(",")]
    target = load_target(options.target, options)
    rng = np.random.default_rng(0)
    arms = ([Arm(DraftChoice())] + [Arm(DraftChoice(model="default"), DraftSettings(k=k)) for k in ks]
            + [Arm(DraftChoice.parse(d), DraftSettings(k=8, policy_kind=PolicyKind.ADAPTIVE))
               for d in ("ngram", "ngram+default")])
    drafters = {spec: load_drafter(spec, target, SamplingParams(), rng, options)
                for spec in dict.fromkeys(a.drafter for a in arms)}
    runner = BenchRunner(target, drafters, arms)
    draft_model = drafters[DraftChoice(model="default")].model
    assert draft_model is not None
    target_path, draft_path = target.path, draft_model.path

    runs: list[Run] = []
    simple: list[Simple] = []
    for repeat in range(args.repeats):
        for p in prompts:
            for run in runner.run(p, repeat):
                runs.append(run)
                print(f"r{repeat} {p.category}/{p.name} {run.arm}: {run.tokens_per_second:.2f}",
                      file=sys.stderr, flush=True)
            text = target.render_chat([("user", p.text)])
            for n in n_maxes:
                r = speculative_simple(bin_dir, target_path, draft_path, text,
                                       p.max_tokens or 96, n, threads)
                simple.append(Simple(p.category, p.name, n, r))
                print(f"r{repeat} {p.category}/{p.name} spec-simple n-max {n}: {r.tok_s:.2f}",
                      file=sys.stderr, flush=True)

    categories = list(dict.fromkeys(p.category for p in prompts))

    def ours(arm: str, category: str | None = None) -> float:
        mine = [r for r in runs if r.arm == arm and category in (None, r.category)]
        return rate([(r.tokens - 1, r.decode_s) for r in mine])

    def theirs(n: int, category: str | None = None) -> float:
        mine = [s for s in simple if s.n_max == n and category in (None, s.category)]
        return rate([(s.run.tokens, s.run.seconds) for s in mine])

    best_n = max(n_maxes, key=theirs)
    rows = ["| category | target only | specchat best fixed k (0.5B) | llama-speculative-simple "
            f"n-max={best_n} | specchat n-gram, adaptive | specchat adaptive (n-gram + 0.5B) "
            "| adaptive / target only | adaptive / llama.cpp |", "|---|---|---|---|---|---|---|---|"]
    for category in [*categories, None]:
        base, adaptive, them = ours("target only", category), ours(ADAPTIVE, category), \
            theirs(best_n, category)
        fixed = max(ks, key=lambda k: ours(f"default k={k}", category))
        rows.append(
            f"| {category or '**whole suite**'} | {base:.2f} | {ours(f'default k={fixed}', category):.2f}"
            f" (k={fixed}) | {them:.2f} | {ours(NGRAM, category):.2f} "
            f"({ours(NGRAM, category) / base:.2f}x) | {adaptive:.2f} | {adaptive / base:.2f}x "
            f"| {adaptive / them:.2f}x |")
    predicted = [r.tokens_per_second / r.predicted_tokens_per_second for r in runs
                 if r.arm in (ADAPTIVE, NGRAM) and r.tokens_per_second
                 and r.predicted_tokens_per_second]
    by_n = ", ".join(f"n-max {n}: {theirs(n):.2f} tok/s, acceptance "
                     f"{statistics.fmean(s.run.acceptance or 0.0 for s in simple if s.n_max == n):.0%}"
                     for n in n_maxes)
    by_k = ", ".join(f"k={k}: {ours(f'default k={k}'):.2f}" for k in ks)
    table = "\n".join([
        f"Default pair ({target_path.name} + {draft_path.name}), greedy, {threads} threads, "
        f"{platform.processor() or platform.machine()}, llama-cpp-python {llama_cpp.__version__}; "
        f"{len(prompts)} prompts x {args.repeats} repeat(s), every arm back to back per prompt. "
        "Decode tok/s = tokens after the first over the seconds after the first token, totalled.",
        "",
        *rows,
        "",
        f"llama-speculative-simple over the suite: {by_n}. specchat fixed k over the suite: {by_k}.",
        f"Measured over predicted tok/s of the adaptive runs (the policy's own cost model): mean "
        f"{statistics.fmean(predicted):.3f}, mean absolute error "
        f"{statistics.fmean(abs(x - 1) for x in predicted):.1%} over {len(predicted)} runs.",
    ])
    publish(table, args.out)
    summaries = report.summarize(runs)
    args.results.mkdir(parents=True, exist_ok=True)
    meta = {"target": target.name, "arms": [a.label for a in arms], "repeats": args.repeats,
            "simple": [asdict(s) for s in simple]}
    report.write_json(args.results / "bench.json", meta, runs, summaries)
    report.write_csv(args.results / "bench.csv", summaries)
    chart.write_svg(args.results / "bench.svg", summaries, f"{target.name}, bench suite")
    (args.results / "bench.md").write_text(report.markdown_table(summaries) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
