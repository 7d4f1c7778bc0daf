"""What draft trees cost on this machine, side by side in one run (a benchmark, not a test).
First, what a context that can verify trees costs a reply that drafts none: the target loaded
with llama.cpp's sequences for trees (n_seq_max 16, one unified cache: what specchat loads)
against one sequence (what it loaded before trees), target-only and speculating at k=3,
alternating; the decode rates' medians and the median of the per-repeat ratios. Then what a
tree's verify pass costs against a chain's of as many rows (a chain of n/2 and one alternative
beside each token), interleaved after the same prompt, in target steps (medians).

    .venv/bin/python -m benchmarks.tree_sequences --repeats 5 --tokens 96
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from benchmarks import arguments
from benchmarks.tools import machine_line
from specchat.backends import llamacpp
from specchat.engine.backend import Backend, user_turn
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import turn_of
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.sampling import SamplingParams
from specchat.loading import load_drafter, load_target, speculative_engine
from specchat.settings import ModelOptions

PROMPT = "Explain how a hash map handles collisions, with a short Python example."


def engines(options: ModelOptions, paths: int) -> dict[str, SpeculativeEngine]:
    """Target-only and k=3 engines on a target (and draft) loaded with `paths` sequences."""
    llamacpp.TREE_PATHS = paths
    target = load_target(options.target, options)
    greedy, rng = SamplingParams(), np.random.default_rng(0)
    drafter = load_drafter(options.draft, target, greedy, rng, options)
    return {"target only": speculative_engine(target, NoDrafter(), greedy),
            "k=3": speculative_engine(target, drafter, greedy, DraftSettings(k=3), rng)}


def main() -> None:
    args = arguments.parser(__doc__, repeats=5, tokens=96).parse_args()
    options = arguments.settings(args).models
    loaded = {paths: engines(options, paths) for paths in (1, 16)}
    ids = user_turn(loaded[16]["target only"].target, PROMPT)
    rates: dict[tuple[int, str], list[float]] = {}
    for r in range(args.repeats):
        for paths in ((1, 16) if r % 2 == 0 else (16, 1)):
            for arm, engine in loaded[paths].items():
                engine.clear_caches()
                turn = turn_of(engine.generate(ids, GenerationSettings(
                    max_tokens=args.tokens, baseline_steps=0)))
                rates.setdefault((paths, arm), []).append(turn.counts.tokens_per_second or 0.0)
    print(machine_line())
    print("| arm | 1 sequence tok/s | 16 sequences tok/s | 16 / 1 (median of repeats) |")
    print("|---|---|---|---|")
    for arm in ("target only", "k=3"):
        one, many = rates[(1, arm)], rates[(16, arm)]
        ratio = statistics.median(m / o for m, o in zip(many, one, strict=True) if o)
        print(f"| {arm} | {statistics.median(one):.1f} | {statistics.median(many):.1f} | "
              f"{ratio:.3f} |")
    tree_against_chain(loaded[16]["target only"].target, ids, 3 * args.repeats)


def tree_against_chain(target: Backend, ids: list[int], repeats: int) -> None:
    """Verify passes of n rows as a chain and as a tree, and a plain step, at the prompt's
    depth."""
    target.truncate(0)
    target.eval(ids[:-1], len(ids))
    base, last = len(target.tokens), ids[-1]
    sizes = (4, 5, 6, 8)

    def chain(n: int) -> None:
        target.eval([last, *range(100, 99 + n)], 0)

    def tree(n: int) -> None:
        k = (n - 1) // 2
        parents = list(range(-1, k - 1)) + [i - 1 for i in range(n - 1 - k)]
        target.eval_tree([last], list(range(100, 99 + n)), parents)
        target.keep_path([])

    seconds: dict[tuple[str, int], list[float]] = {}
    for _ in range(repeats):
        for n in (1, *sizes):
            for name, run in (("chain", chain), ("tree", tree)):
                if n == 1 and name == "tree":
                    continue
                t0 = time.perf_counter()
                run(n)
                seconds.setdefault((name, n), []).append(time.perf_counter() - t0)
                target.truncate(base)
    step = statistics.median(seconds[("chain", 1)])
    print(f"\none target step {step * 1000:.1f} ms")
    print("| rows | chain (steps) | tree (steps) |")
    print("|---|---|---|")
    for n in sizes:
        print(f"| {n} | {statistics.median(seconds[('chain', n)]) / step:.2f} | "
              f"{statistics.median(seconds[('tree', n)]) / step:.2f} |")


if __name__ == "__main__":
    main()
