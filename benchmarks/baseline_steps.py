"""How the speedup's interval narrows with the target-only steps each reply times after it
(`--baseline-steps`), and what those steps cost: the numbers behind its default
(docs/benchmark.md).

One speculative turn of the default pair per setting, the settings in a rotating order for
`--repeats` rounds; for each, the median width of the 95% interval (high - low, over the
speedup) and the median seconds the baseline steps added after the reply.

    .venv/bin/python -m benchmarks.baseline_steps --repeats 5 --tokens 96
"""

from __future__ import annotations

import statistics
import sys
import time

from benchmarks import arguments
from specchat.bench.runner import fresh
from specchat.engine.events import TurnEvent
from specchat.engine.loop import GenerationSettings

PROMPT = "Write a Python function that checks whether a number is prime, with a docstring."
STEPS = (2, 4, 8, 16)


def main() -> int:
    ap = arguments.parser(__doc__, arguments.CPU_ONLY, repeats=5, tokens=96, k=3)
    args = ap.parse_args()
    engine = arguments.greedy_engine(arguments.settings(args).models, args.k)
    target = engine.target
    ids = target.tokenize(target.render_chat([("user", PROMPT)]))
    widths: dict[int, list[float]] = {n: [] for n in STEPS}
    costs: dict[int, list[float]] = {n: [] for n in STEPS}
    speedups: dict[int, list[float]] = {n: [] for n in STEPS}
    for repeat in range(args.repeats):
        for n in STEPS[repeat % len(STEPS):] + STEPS[:repeat % len(STEPS)]:
            fresh(engine)
            start = time.perf_counter()
            turn = next(e for e in engine.generate(ids, GenerationSettings(
                max_tokens=args.tokens, baseline_steps=n)) if isinstance(e, TurnEvent))
            total = time.perf_counter() - start
            if turn.speedup and turn.speedup_low is not None and turn.speedup_high is not None:
                widths[n].append((turn.speedup_high - turn.speedup_low) / turn.speedup)
                speedups[n].append(turn.speedup)
            # what the steps added: the turn's wall time less the reply's own
            costs[n].append(total - turn.wall_s)
        print(f"repeat {repeat + 1}/{args.repeats} done", file=sys.stderr)
    print(f"Greedy, {args.tokens} tokens, k={args.k}, {args.repeats} repeats (medians):\n")
    print("| baseline steps | interval width / speedup | speedup (median, spread over repeats) "
          "| seconds the steps add to the turn |")
    print("|---|---|---|---|")
    for n in STEPS:
        s = speedups[n]
        print(f"| {n} | {statistics.median(widths[n]):.3f} | {statistics.median(s):.3f} "
              f"({min(s):.3f}-{max(s):.3f}) | {statistics.median(costs[n]):.2f} |")
    engine.target.close()
    engine.drafter.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
