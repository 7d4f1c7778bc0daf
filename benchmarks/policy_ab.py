"""The adaptive policy of a git revision against the working tree's, side by side with
target-only: one runner, the three arms interleaved per prompt in rotating order, each policy
with a fresh cost model on the same verify curve. Prints each prompt's rates and each
category's median and mean ratio to target-only (the comparisons in
docs/lab/2026-12-02-code-blocks-and-prose-what-the-target.md), then the working tree's policy
over the revision's, paired by prompt and repeat, with a 95% interval: whether they differ
beyond the spread of single replies. A revision from the policy package on has no single-file
policy to load (benchmarks.policy_replay compares those); fd2a663 is the last one that has.

    .venv/bin/python -m benchmarks.policy_ab --against fd2a663 --repeats 3
"""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from benchmarks import arguments
from specchat.bench.runner import Arm, BenchRunner, load_prompts
from specchat.choices import DraftChoice
from specchat.engine import policy as tree_policy
from specchat.engine.loop import DraftSettings
from specchat.engine.sampling import SamplingParams
from specchat.engine.types import Draft
from specchat.loading import load_drafter, load_target

K_MAX = 8


def policy_at(revision: str) -> ModuleType:
    """specchat/engine/policy.py as it was at `revision`, loaded as a module of its own (a
    revision from the policy package on has none: compare those with benchmarks.policy_replay's
    decisions, or with `specchat bench` at each revision)."""
    shown = subprocess.run(["git", "show", f"{revision}:specchat/engine/policy.py"],
                           capture_output=True, text=True)
    if shown.returncode:
        raise SystemExit(f"policy_ab: {revision} has no single-file policy (the policy package "
                         "came after it): benchmarks.policy_replay compares those")
    source = shown.stdout
    path = Path(tempfile.mkdtemp()) / "policy_at_revision.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("policy_at_revision", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    if not hasattr(module.CostModel, "writing"):  # before the kinds of text: it hears nothing
        module.CostModel.writing = lambda self, kind: None
    # a single-file CostModel holds what the engine reads of the package's parts itself
    module.CostModel.machine = module.CostModel.reply = property(lambda self: self)
    observe, expect = module.CostModel.observe, module.CostModel.expect  # and drafted no trees
    module.CostModel.observe = (lambda self, draft, *args, branch_stood=None:
                                observe(self, _DraftAsThen(draft), *args))
    module.CostModel.expect = lambda self, draft: expect(self, _DraftAsThen(draft))
    _reached_as_today(module.AdaptivePolicy)
    return module


class _DraftAsThen:
    """A Draft as a revision before DraftCost read it: the cost's fields on the draft."""

    def __init__(self, draft: Draft) -> None:
        self.draft = draft

    def __getattr__(self, name: str) -> object:
        cost = self.draft.cost
        return getattr(cost if hasattr(cost, name) else self.draft, name)

    def __len__(self) -> int:
        return len(self.draft)


def _reached_as_today(cls: Any) -> None:
    """The loop reaches a policy through `plan(cap, writing=...)`, the plan's `batch_for` and
    `observe` (specchat/engine/policy/base.py): give the revision's policy the same."""
    plan = cls.plan

    def plan_writing(self, cap: int, writing: str | None = None):
        if writing is not None:
            self.costs.writing(writing)
        made = plan(self, cap)
        made.batch_for = getattr(self.costs, "batch_for", lambda n: n)
        made.why = getattr(made, "why", "")  # it gave no reasons
        return made

    cls.plan = plan_writing
    cls.observe = tree_policy.Policy.observe


def main() -> None:
    ap = arguments.parser(__doc__, repeats=2, categories="", prompts=None)
    ap.add_argument("--against", default="HEAD", help="the git revision whose policy to compare")
    args = ap.parse_args()
    options = arguments.settings(args).models
    target = load_target(options.target, options)
    drafters = {name: load_drafter(name, target, SamplingParams(), np.random.default_rng(0),
                                   options) for name in ("none", options.draft)}
    adaptive = DraftSettings(k=K_MAX, adaptive=True)
    runner = BenchRunner(target, drafters, [Arm(DraftChoice()), Arm(DraftChoice.parse(options.draft), adaptive),
                                            Arm(DraftChoice.parse(options.draft), adaptive)])
    modules = {args.against: policy_at(args.against), "tree": tree_policy}
    arms = {"none": runner.engines[0]}
    for (arm, engine), (name, module) in zip(runner.engines[1:], modules.items()):
        costs = module.CostModel()
        machine = engine.policy.costs.machine
        costs.machine.shape, costs.machine.verify = machine.shape, dict(machine.verify)
        engine.policy = module.AdaptivePolicy(K_MAX, costs)
        arms[name] = (arm, engine)
    prompts = load_prompts(args.prompts, arguments.categories(args))
    ratios = side_by_side(runner, arms, prompts, args.repeats)
    report(ratios, prompts, args.against, "tree")


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


def report(ratios: dict[tuple[str, str], list[float]], prompts: list, base: str,
           other: str) -> None:
    """Each category's median and mean ratio to target-only for every arm, then `other`
    over `base`, paired (`paired_median`)."""
    names = list(dict.fromkeys(name for _, name in ratios))
    for category in dict.fromkeys(p.category for p in prompts):
        print(category, *(f"{name}: median {statistics.median(ratios[(category, name)]):.3f} "
                          f"mean {statistics.mean(ratios[(category, name)]):.3f}"
                          for name in names), sep=" | ")
    every = {name: [r for (_, n), rs in ratios.items() if n == name for r in rs]
             for name in names}
    print("all", *(f"{name}: median {statistics.median(rs):.3f}" for name, rs in every.items()),
          sep=" | ")
    for category in [*dict.fromkeys(p.category for p in prompts), "all"]:
        pick = every if category == "all" else {n: ratios[(category, n)] for n in names}
        print(f"{category}: {other} over {base}, {paired_median(pick[base], pick[other])}")


def paired_median(base: list[float], other: list[float]) -> str:
    """The median of `other[i] / base[i]` (two arms' ratios to target-only on the same prompt
    and repeat) with its 95% interval (a percentile bootstrap over the pairs, fixed seed), and
    how many pairs `other` won: what tells two policies apart beyond the spread of replies."""
    r = np.asarray(other) / np.asarray(base)
    picks = np.random.default_rng(0).integers(0, len(r), (2000, len(r)))
    low, high = np.percentile(np.median(r[picks], axis=1), [2.5, 97.5])
    return (f"median {np.median(r):.3f} (95%: {low:.3f}-{high:.3f}), "
            f"ahead in {int((r > 1).sum())} of {len(r)}")


if __name__ == "__main__":
    main()
