"""A cost model as a reply leaves it, for policy tests: timed, and fed rounds by hand."""

from __future__ import annotations

from specchat.engine.policy import CostModel, GuardedPolicy
from specchat.engine.types import Draft, DraftCost

M = "draft-model"
STEP = 0.040
"""A plain target step: 25 tok/s."""


def warm(pass_s: float = 0.010, verify_slope: float = 0.1) -> CostModel:
    """A cost model that has timed a plain step, verify batches of 2 and 4, and the draft's
    pass, and has seen the target sure of its first tokens."""
    costs = CostModel()
    costs.observe(Draft(), 0, 0.0, STEP, 1, [0.9, 0.9, 0.9])
    for n in (2, 4):
        costs.observe(Draft(tokens=[0] * (n - 1)), 0, 0.0, STEP * (1 + verify_slope * (n - 1)), n)
    costs.machine.learn_pass(M, pass_s)
    return costs


def drafted(costs: CostModel, k: int, stood: int, seconds: float) -> None:
    """A round that drafted k tokens in step (nothing to catch up on), of which `stood` stood,
    in `seconds` (draft and verify together)."""
    draft = Draft(tokens=list(range(k)), q=[1.0] * k, source=M, uses_passes=True,
                  cost=DraftCost(behind=1, catchup_s=seconds / 2))
    costs.observe(draft, stood, seconds / 2, seconds / 2, k + 1, [0.9] * (stood + 1))


def k_of(policy: GuardedPolicy, behind: int = 1):
    plan = policy.plan(cap=100)
    return plan.k(M, True, behind), plan
