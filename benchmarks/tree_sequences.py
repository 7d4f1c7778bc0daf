"""What a context that can verify draft trees costs a reply that drafts none: the target loaded
with llama.cpp's sequences for trees (n_seq_max 16, one unified cache: what specchat loads)
against one sequence (what it loaded before trees), target-only and speculating at k=3,
alternating, side by side in one run (a benchmark, not a test). Prints the decode rates' medians
and the median of the per-repeat ratios.

    .venv/bin/python -m benchmarks.tree_sequences --repeats 5 --tokens 96
"""

from __future__ import annotations

import statistics

import numpy as np

from benchmarks import arguments
from benchmarks.tools import machine_line
from specchat.backends import llamacpp
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
    ids = loaded[16]["target only"].target.tokenize(
        loaded[16]["target only"].target.render_chat([("user", PROMPT)]))
    rates: dict[tuple[int, str], list[float]] = {}
    for r in range(args.repeats):
        for paths in ((1, 16) if r % 2 == 0 else (16, 1)):
            for arm, engine in loaded[paths].items():
                engine.clear_caches()
                turn = turn_of(engine.generate(ids, GenerationSettings(
                    max_tokens=args.tokens, baseline_steps=0)))
                rates.setdefault((paths, arm), []).append(turn.tokens_per_second or 0.0)
    print(machine_line())
    print("| arm | 1 sequence tok/s | 16 sequences tok/s | 16 / 1 (median of repeats) |")
    print("|---|---|---|---|")
    for arm in ("target only", "k=3"):
        one, many = rates[(1, arm)], rates[(16, arm)]
        ratio = statistics.median(m / o for m, o in zip(many, one, strict=True) if o)
        print(f"| {arm} | {statistics.median(one):.1f} | {statistics.median(many):.1f} | "
              f"{ratio:.3f} |")


if __name__ == "__main__":
    main()
