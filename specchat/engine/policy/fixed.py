"""llama.cpp's rule: draft k tokens, stop below a confidence."""

from __future__ import annotations

from dataclasses import dataclass

from specchat.engine.policy.base import Policy, PricedPlan
from specchat.engine.policy.branching import Branching, TreeSettings
from specchat.engine.policy.cost_model import CostModel
from specchat.engine.policy.kind import PolicyKind
from specchat.engine.types import Plan


@dataclass
class _FixedPlan(PricedPlan):
    k_max: int
    p_min: float
    costs: CostModel
    branching: Branching | None = None
    declined: bool = False
    why: str = ""
    resumed: str = ""
    asked: int = 0

    def k(self, source: str, uses_passes: bool, behind: int = 0) -> int:
        self.asked = self.k_max
        return self.k_max

    def keep(self, source: str, i: int, conf: float) -> bool:
        return conf >= self.p_min

    def worth_a_pass(self, source: str, i: int) -> bool:
        return True  # llama.cpp's rule: draft on to k unless the confidence falls below p_min

    @property
    def width(self) -> int:
        return self.branching.width if self.branching else 1

    @property
    def p_branch(self) -> float:
        return self.branching.p_max if self.branching else 0.0

    def alternatives(self, source: str, i: int, conf: float | None, chances: list[float]) -> int:
        if self.branching is None:
            return 0
        costs = self.costs
        return self.branching.alternatives(costs.branches, costs.acceptance, costs.machine,
                                           source, i, conf, chances, 1 + self.asked, 0.0)


class FixedPolicy(Policy):
    """Draft k tokens every round, stopping below `p_min`; still predicts each round's rate."""

    kind = PolicyKind.FIXED

    def __init__(self, k: int, p_min: float = 0.0, costs: CostModel | None = None,
                 tree: TreeSettings | None = None) -> None:
        self.k, self.p_min, self.tree = k, p_min, tree
        self.name = f"fixed k={k}" + (" tree" if tree else "")
        self.costs = costs or CostModel()

    def _plan(self, cap: int) -> Plan:
        branching = self.tree.branching(priced=False) if self.tree else None
        return _FixedPlan(min(self.k, cap), self.p_min, self.costs, branching)

    def start_turn(self) -> None:
        """A reply begins: its state (kind of text, running confidence) starts again, and the
        last one's length joins the others."""
        self.costs.start_turn()
