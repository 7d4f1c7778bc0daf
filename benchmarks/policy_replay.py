"""Every decision of the policies on a seeded script of rounds, as JSON: whether a change to
engine/policy/ changed what the policy does (a refactor must print the same bytes). No model
runs: the script invents drafts, confidences, acceptances and timings, and feeds them to a
CostModel under the adaptive policy (with and without a known verify curve) and the fixed one,
recording each round's k, declines, keeps, passes, predictions and prices.

    .venv/bin/python -m benchmarks.policy_replay > after.json
    git stash; .venv/bin/python -m benchmarks.policy_replay > before.json; git stash pop
    cmp before.json after.json
"""

from __future__ import annotations

import json
import random
import sys

from specchat.engine.policy import AdaptivePolicy, CostModel, FixedPolicy, MachineCosts
from specchat.engine.types import Draft, DraftCost

SHAPE = (1.0, 1.6, 2.1, 1.4, 2.1, 2.6, 3.0, 2.4, 3.0, 3.4, 3.8, 3.3)


def one_round(policy: AdaptivePolicy | FixedPolicy, rng: random.Random, r: int) -> list:
    """A round: the plan's choices, the draft they make, the prediction, then what it cost."""
    costs = policy.costs
    costs.writing(rng.choice(["text", "code"]))
    plan = policy.plan(rng.choice([8, 8, 8, 5, 2, 0]))
    source = rng.choice(["m", "m", "ng2", "ng3"])
    uses = source == "m"
    behind = rng.choice([1, 2, 2, 2, 7, 40])
    k = plan.k(source, uses, behind)
    record: list = [r, source, k, plan.declined, round(plan.rate, 12) if hasattr(plan, "rate") else None]
    tokens, conf = [], []
    for i in range(k):
        if uses:
            record.append(("w", plan.worth_a_pass(source, i)))
            if not record[-1][1]:
                break
        c = rng.random() ** 0.5
        record.append(("k", plan.keep(source, i, c)))
        if not record[-1][1]:
            break
        tokens.append(rng.randrange(100))
        conf.append(c)
    draft = Draft(tokens=tokens, q=conf, source=source if (tokens or uses) else "",
                  conf=conf if uses else [], uses_passes=uses,
                  cost=DraftCost(behind=behind if uses else 0,
                                 catchup_s=(0.01 + 0.002 * behind) if uses and k else 0.0,
                                 later_draws=max(0, len(tokens) - 1) if uses else 0))
    record.append(("e", [round(x, 12) for x in costs.expect(draft)]))
    accepted = min(len(tokens), sum(rng.random() < 0.7 for _ in tokens))
    batch = rng.choice([len(tokens) + 1, len(tokens) + 1, 0])
    machine = costs.machine
    record.append(("b", machine.batch_for(len(tokens) + 1), round(machine.check_s(len(tokens) + 1), 12)))
    costs.observe(draft, accepted, 0.004 * (len(tokens) + 1) * rng.uniform(0.8, 1.2),
                  0.05 * (1 + 0.3 * len(tokens)) * rng.uniform(0.8, 1.2), batch,
                  [rng.random() ** 0.3 for _ in range(accepted + 1)])
    record.append(("pa", costs.predicted_accept("m"), costs.predicted_accept("ng2", True)))
    record.append(("dr", round(machine.draft_s("m", 3, True, 5), 12), round(machine.verify_s(7), 12)))
    return record


def main() -> int:
    out = []
    for seed in range(6):
        rng = random.Random(seed)
        costs = CostModel(MachineCosts(shape=SHAPE if seed % 2 else ()))
        policy = AdaptivePolicy(8, costs) if seed < 4 else FixedPolicy(3, 0.3, costs)
        for r in range(600):
            if r % 60 == 0:
                policy.start_turn()
            if r % 200 == 199:
                costs.new_conversation()
            out.append(one_round(policy, rng, r))
    json.dump(out, sys.stdout, default=repr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
