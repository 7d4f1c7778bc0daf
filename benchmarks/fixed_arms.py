"""Fixed-k variants side by side with target-only: a confidence stop (`p_min`), drafting with
a model only inside ``` blocks, and a second target-only arm as a control (a benchmark, not a
test).

Each arm is `[DRAFTER:]K[@P_MIN][/code]` (DRAFTER as --draft takes it, the --draft flag's if
left out), or `none` for a second target-only engine. `/code` drafts with the model only where
the reply is inside a ``` block (`engine/text_kind.py`) and declines every other round, as if
prose were known not to pay; an n-gram drafter still proposes there (its tokens cost no pass).
One runner, every arm beside the target alone on each prompt, the order rotated every prompt
and repeat. Reported: each prompt's rates, then each category's median ratio to target-only.

    .venv/bin/python -m benchmarks.fixed_arms --arms 3,3@0.3,3@0.5,4@0.5 --repeats 2
    .venv/bin/python -m benchmarks.fixed_arms --arms 3,3/code,ngram+default:3,ngram+default:3/code --repeats 3
    .venv/bin/python -m benchmarks.fixed_arms --arms none,3/code --categories short,long --repeats 6
"""

from __future__ import annotations

import statistics
from collections import defaultdict

import numpy as np

from benchmarks import arguments
from specchat.bench.runner import Arm, BenchRunner, load_prompts
from specchat.engine.loop import DraftSettings
from specchat.engine.policy import FixedPolicy
from specchat.engine.sampling import SamplingParams
from specchat.engine.text_kind import CODE
from specchat.engine.types import Plan
from specchat.loading import load_drafter, load_target


class _CodeOnlyPlan:
    """The fixed plan where the reply is in code; elsewhere no draft from a model."""

    def __init__(self, plan: Plan, in_code: bool) -> None:
        self.plan, self.in_code = plan, in_code
        self.declined, self.asked = False, 0

    def k(self, source: str, uses_passes: bool, behind: int = 0) -> int:
        self.asked = self.plan.k(source, uses_passes, behind) if self.in_code or not uses_passes else 0
        self.declined = self.asked == 0
        return self.asked

    def keep(self, source: str, i: int, conf: float) -> bool:
        return self.plan.keep(source, i, conf)

    def worth_a_pass(self, source: str, i: int) -> bool:
        return self.plan.worth_a_pass(source, i)


class CodeOnlyPolicy(FixedPolicy):
    """Fixed k inside ``` blocks; outside them no pass of a draft model (n-gram proposals
    still go)."""

    def plan(self, cap: int) -> Plan:
        return _CodeOnlyPlan(super().plan(cap), in_code=self.costs.reply.kind == CODE)


def parse_arm(spec: str, default_drafter: str) -> tuple[Arm, bool]:
    """`[DRAFTER:]K[@P_MIN][/code]` or `none` -> the arm, and whether it drafts only in code."""
    if spec == "none":
        return Arm("none"), False
    rest, code_only = spec.removesuffix("/code"), spec.endswith("/code")
    drafter, _, rest = rest.rpartition(":")
    k, _, p_min = rest.partition("@")
    settings = DraftSettings(k=int(k), p_min=float(p_min or 0.0))
    return Arm(drafter or default_drafter, settings), code_only


def main() -> None:
    ap = arguments.parser(__doc__, repeats=2, categories="")
    ap.add_argument("--arms", default="3,3@0.3,3@0.5",
                    help="comma-separated arms, [DRAFTER:]K[@P_MIN][/code] or none "
                         "(default: %(default)s)")
    args = ap.parse_args()
    options = arguments.settings(args).models
    specs = args.arms.split(",")
    parsed = [parse_arm(spec, options.draft) for spec in specs]
    target = load_target(options.target, options)
    drafters = {name: load_drafter(name, target, SamplingParams(), np.random.default_rng(0),
                                   options)
                for name in dict.fromkeys(["none"] + [arm.drafter for arm, _ in parsed])}
    runner = BenchRunner(target, drafters, [Arm("none")] + [arm for arm, _ in parsed])
    for (_, engine), (_, code_only) in zip(runner.engines[1:], parsed):
        if code_only:
            policy = engine.policy
            assert isinstance(policy, FixedPolicy)
            engine.policy = CodeOnlyPolicy(policy.k, policy.p_min, policy.costs)
    names = ["target only"] + specs
    engines = list(runner.engines)
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    prompts = load_prompts(None, arguments.categories(args))
    for rep in range(args.repeats):
        for n, prompt in enumerate(prompts):
            first = (rep + n) % len(engines)
            order = list(range(first, len(engines))) + list(range(first))
            runner.engines = [engines[i] for i in order]
            rates = {names[i]: run.tokens_per_second or 0.0
                     for i, run in zip(order, runner.run(prompt, rep))}
            for name in specs:
                ratios[(prompt.category, name)].append(rates[name] / rates["target only"])
            print(f"{prompt.category}/{prompt.name} repeat {rep}:",
                  ", ".join(f"{name} {rate:.1f}" for name, rate in rates.items()), flush=True)
    print("median ratio to target-only:", *specs, sep=" | ")
    for category in dict.fromkeys(p.category for p in prompts):
        print(category, *(f"{statistics.median(ratios[(category, s)]):.3f}" for s in specs),
              sep=" | ")
    print("all", *(f"{statistics.median(r for (_, s2), rs in ratios.items() if s2 == s for r in rs):.3f}"
                   for s in specs), sep=" | ")


if __name__ == "__main__":
    main()
