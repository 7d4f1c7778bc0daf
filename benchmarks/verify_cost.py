"""What a verify pass costs on this machine: the target's eval of n tokens, with logits for every
row (what verification needs) and for the last row only, against a single step (a benchmark,
not a test; medians of --repeats).

    .venv/bin/python -m benchmarks.verify_cost --repeats 5
"""

from __future__ import annotations

import statistics
import time

from benchmarks import arguments
from specchat.engine.policy import expected_tokens
from specchat.engine.sampling import row_summary
from specchat.settings import ModelOptions, Settings

SIZES = (1, 2, 3, 4, 5, 6, 8, 10, 12)
PROMPT = "Write a Python module that implements a binary search tree with insert and delete."


def main() -> int:
    args = arguments.parser(__doc__, Settings(ModelOptions(target_gpu_layers=0)),
                            repeats=5).parse_args()
    target, ids, base = arguments.target_at_prompt(args, PROMPT)

    def timed(n: int, logits_from: int) -> float:
        target.truncate(base)
        t0 = time.perf_counter()
        for row in target.eval(ids[:n], logits_from):
            row_summary(row)
        return time.perf_counter() - t0

    every = {n: statistics.median(timed(n, 0) for _ in range(args.repeats)) for n in SIZES}
    last = {n: statistics.median(timed(n, n - 1) for _ in range(args.repeats)) for n in SIZES}
    print(f"context {base} tokens, {target.name}, medians of {args.repeats}")
    print("| tokens verified in one pass | " + " | ".join(map(str, SIZES)) + " |")
    print("|---|" + "---|" * len(SIZES))
    print("| ms, logits for every row | " + " | ".join(f"{every[n] * 1000:.0f}" for n in SIZES) + " |")
    print("| ms, logits for the last row only | "
          + " | ".join(f"{last[n] * 1000:.0f}" for n in SIZES) + " |")
    print("| times a single step | " + " | ".join(f"{every[n] / every[1]:.1f}" for n in SIZES) + " |")
    for a in (0.9, 0.95, 1.0):  # a free drafter (n-gram): k draft tokens cost only the verify
        k, bound = max(((n - 1, expected_tokens([a] * (n - 1)) / (every[n] / every[1]))
                        for n in SIZES if n > 1), key=lambda kb: kb[1])
        print(f"best speedup a free drafter can reach at {a:.0%} acceptance: {bound:.2f}x (k={k})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
