"""What the speculative loop costs when its policy drafts nothing (a benchmark, not a test).

Where speculation does not pay (prose on a 2-core CPU) the adaptive policy declines round after
round, and the reply should then run as fast as the target alone. This runs the target alone
against the default pair under the adaptive policy with every draft priced out of reach (a
draft costs 10 s in its cost model, so each round goes through the whole choice and declines,
and no probe could pay), side by side in one runner, the order of the two swapped every
repeat. Reported: each reply's rates and the median ratio. What is left between a reply that
declined throughout and target-only is the loop's own cost; what the suite's prose loses
beyond it is what the policy's catch-ups and probes cost.

    .venv/bin/python -m benchmarks.decline_cost --repeats 4
"""

from __future__ import annotations

import statistics

import numpy as np

from benchmarks import arguments
from specchat.bench.runner import Arm, BenchRunner, load_prompts
from specchat.engine.loop import DraftSettings
from specchat.engine.sampling import SamplingParams
from specchat.loading import load_drafter, load_target

PRICED_OUT_S = 10.0


def main() -> None:
    ap = arguments.parser(__doc__, repeats=4, categories="short,long")
    args = ap.parse_args()
    options = arguments.settings(args).models
    target = load_target(options.target, options)
    drafters = {name: load_drafter(name, target, SamplingParams(), np.random.default_rng(0),
                                   options) for name in ("none", options.draft)}
    adaptive = Arm(options.draft, DraftSettings(k=8, adaptive=True))
    runner = BenchRunner(target, drafters, [Arm("none"), adaptive])
    alone, declining = runner.engines
    costs = declining[1].policy.costs
    costs.machine.draft_s = lambda *_args, **_kw: PRICED_OUT_S  # type: ignore[method-assign]
    ratios: list[float] = []
    for rep in range(args.repeats):
        for prompt in load_prompts(None, arguments.categories(args)):
            runner.engines = [alone, declining] if rep % 2 == 0 else [declining, alone]
            runs = {run.drafter: run for run in runner.run(prompt, rep)}
            base, other = runs.pop("none"), next(iter(runs.values()))
            if other.drafted:
                raise SystemExit(f"{prompt.name}: the priced-out policy drafted {other.drafted}")
            ratios.append((other.tokens_per_second or 0.0) / (base.tokens_per_second or 1.0))
            print(f"{prompt.category}/{prompt.name} repeat {rep}: target alone "
                  f"{base.tokens_per_second:.2f} tok/s, declining {other.tokens_per_second:.2f} "
                  f"({other.declined_rounds} rounds declined)", flush=True)
    print(f"declining / target alone: median {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} replies)")


if __name__ == "__main__":
    main()
