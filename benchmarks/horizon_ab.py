"""The adaptive policy as it is against the same policy whose catch-ups are earned back within
32 tokens only (its `ReplyLengths` never learn: the policy before reply lengths), side by side
with target-only in one runner, the arms' order rotating, reported as benchmarks.policy_ab does:
each category's medians, then the paired ratio with its 95% interval
(docs/lab/2026-12-05-a-catch-up-earned-back-over-as-many-tokens.md).

    .venv/bin/python -m benchmarks.horizon_ab --target default --draft default --repeats 2
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from benchmarks import arguments
from benchmarks.policy_ab import report
from specchat.bench.runner import Arm, BenchRunner, load_prompts
from specchat.choices import DraftChoice
from specchat.engine.loop import DraftSettings
from specchat.engine.policy import PolicyKind
from specchat.engine.policy.reply import ReplyLengths
from specchat.engine.sampling import SamplingParams
from specchat.loading import load_drafter, load_target

K_MAX = 8


class Unlearned(ReplyLengths):
    """Reply lengths that are never learned: the horizon stays at 32 tokens."""

    def add(self, tokens: int) -> None:
        pass


def main() -> None:
    args = arguments.parser(__doc__, repeats=2, categories="", prompts=None).parse_args()
    options = arguments.settings(args).models
    target = load_target(options.target, options)
    drafters = {name: load_drafter(name, target, SamplingParams(), np.random.default_rng(0),
                                   options) for name in ("none", options.draft)}
    adaptive = DraftSettings(k=K_MAX, policy_kind=PolicyKind.ADAPTIVE)
    runner = BenchRunner(target, drafters, [Arm(DraftChoice())] + [Arm(DraftChoice.parse(options.draft), adaptive)] * 2)
    arms = dict(zip(["none", "32 tokens", "reply lengths"], runner.engines))
    arms["32 tokens"][1].policy.costs.lengths = Unlearned()
    prompts = load_prompts(args.prompts, arguments.categories(args))
    report(side_by_side(runner, arms, prompts, args.repeats), prompts, "32 tokens",
           "reply lengths")


def side_by_side(runner: BenchRunner, arms: dict, prompts: list, repeats: int
                 ) -> dict[tuple[str, str], list[float]]:
    """Each prompt through target-only (`arms["none"]`) and every other arm, their order
    rotating by prompt and repeat; each arm's rate over target-only's, by (category, arm)."""
    names = [name for name in arms if name != "none"]
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    for rep in range(repeats):
        for n, prompt in enumerate(prompts):
            turn = (rep + n) % len(names)
            order = names[turn:] + names[:turn]
            runner.engines = [arms["none"]] + [arms[name] for name in order]
            runs = dict(zip(["none", *order], runner.run(prompt, rep)))
            rates = {name: run.tokens_per_second or 0.0 for name, run in runs.items()}
            for name in names:
                ratios[(prompt.category, name)].append(rates[name] / rates["none"])
            print(prompt.category, prompt.name, {k: round(v, 2) for k, v in rates.items()},
                  flush=True)
    return ratios


if __name__ == "__main__":
    main()
