"""What every policy shares: the cost model it prices rounds with, reached by the loop only
through `plan` (before a round) and `observe` (after it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specchat.engine.policy.cost_model import CostModel
from specchat.engine.policy.kind import PolicyKind
from specchat.engine.types import Draft, Plan


@dataclass(frozen=True)
class Prediction:
    """What the cost model expected of a round before it was verified."""

    tokens: float | None
    seconds: float | None
    target_conf: float | None
    """The target's running confidence where the round began."""


@dataclass(frozen=True)
class Seen:
    """What a finished round showed the policy."""

    accepted: int
    """The chain's draft tokens that stood."""
    branch_stood: int | None
    draft_s: float
    verify_s: float
    batch: int
    """The verify pass's tokens, padding and branches included; 0 where it also read a backlog."""
    confidence: Sequence[float]
    """The target's top probability at each position the round committed."""


class Policy:
    """A draft-length policy: `plan` a round, `observe` what it did."""

    name: str
    kind: PolicyKind
    costs: CostModel

    def plan(self, cap: int, writing: str | None = None) -> Plan:
        """The round's budget, at most `cap` tokens; `writing` is what the reply writes where
        the round begins (text, code)."""
        if writing is not None:
            self.costs.writing(writing)
        return self._plan(cap)

    def _plan(self, cap: int) -> Plan:
        raise NotImplementedError

    def start_turn(self) -> None:
        """A reply begins (a new message may be another kind of text)."""

    def observe(self, draft: Draft, seen: Seen, predict: bool = True) -> Prediction:
        """Learn from a finished round; return what the model expected of it beforehand
        (tokens and seconds None where `predict` is False: a turn's first round, which reads
        the prompt)."""
        costs = self.costs
        expected = costs.expect(draft) if predict else None
        before = Prediction(expected[0] if expected else None, expected[1] if expected else None,
                            costs.reply.target_conf)
        costs.observe(draft, seen.accepted, seen.draft_s, seen.verify_s, seen.batch,
                      seen.confidence, branch_stood=seen.branch_stood)
        return before


class PricedPlan:
    """What every round's plan shares: the verify batch the machine's costs say to pay for."""

    costs: CostModel

    def batch_for(self, n: int) -> int:
        """The verify batch to run for `n` tokens (larger where a larger one costs less)."""
        return self.costs.machine.batch_for(n)
