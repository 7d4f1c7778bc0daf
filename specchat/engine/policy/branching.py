"""Where a draft tree branches: beside a kept draft token the draft was unsure of, its next-best
tokens, each verified in the same pass as the chain, while the node budget lasts and (priced)
while what an alternative is expected to add pays for the rows it adds to the verify batch.

An alternative adds a token only where the round reaches its position, the chain's token there
is refused, and the alternative is the target's choice: then the round commits it and the
target's next token, one more than the correction alone."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specchat.engine.policy.acceptance import Acceptance
from specchat.engine.policy.machine import MachineCosts
from specchat.engine.policy.rates import CONF_BINS, Rate, conf_bin

POINT_CHANCE = 0.5
"""The chance given to a point-mass alternative (an earlier n-gram match that went on otherwise)
where the chain's token was refused, before its source's alternatives were measured: two
continuations of the same text, as likely as each other."""


def chance_given_refused(q_alt: float, q_before: float) -> float:
    """The draft's own probability that an alternative is right once the tokens drawn before
    it at its position (their probabilities summing to `q_before`) were refused."""
    return min(1.0, q_alt / max(1e-9, 1.0 - q_before))


@dataclass
class BranchRates:
    """How often an alternative stood where it was tested (the chain's token and the earlier
    alternatives at its position refused), by the draft's conditional probability of it
    (`chance_given_refused`), binned; calibrated as the chain's confidences are."""

    by_chance: dict[str, list[Rate]] = field(default_factory=dict)

    def rate(self, source: str, chance: float) -> float:
        bins = self.by_chance.get(source)
        return chance if bins is None else bins[conf_bin(chance)].mean

    def observe(self, source: str, chance: float, stood: bool) -> None:
        bins = self.by_chance.setdefault(source, _prior_bins())
        bins[conf_bin(chance)].add(stood)

    def new_conversation(self) -> None:
        for bins in self.by_chance.values():
            for rate in bins:
                rate.shrink()


def _prior_bins() -> list[Rate]:
    """Each bin's prior is its lower edge: taken as right no more often than the draft's
    probability says until measured."""
    return [Rate(low) for low in (0.0, *CONF_BINS[:-1])]


@dataclass
class Branching:
    """One round's tree budget: `nodes` alternatives at most, only beside tokens drafted with
    a top probability below `p_max`, at most `width` candidates a position (the chain's
    included). `priced`: an alternative must also add tokens at least as fast as the round's
    expected rate, from this machine's verify curve (the adaptive policy); else the budget and
    the threshold alone decide (the fixed policy, llama.cpp's kind of rule)."""

    nodes: int
    p_max: float
    width: int = 3
    priced: bool = False
    used: int = 0
    reach: float = 1.0
    """P(the round reaches the next draft position): the chain's calibrated chances so far."""

    def alternatives(self, rates: BranchRates, acceptance: Acceptance, machine: MachineCosts,
                     source: str, i: int, conf: float | None, chances: list[float], batch: int,
                     rate: float) -> int:
        """How many of the alternatives to verify beside kept draft token i (`chances`: each
        one's chance of being right once the tokens before it at i were refused, as the drafter
        knew it before drawing that alternative: never the drawn token's own probability, which
        would bias what the sampling rule tests), drawn with confidence `conf` (None: a drafter
        without one, whose alternatives are point masses, each `POINT_CHANCE` until measured);
        `batch`: the verify batch of the chain (the alternatives taken come on top); `rate`:
        the round's expected tokens a second."""
        if conf is None:
            accept = acceptance.position_rate(source, i)
            reach = math.prod(acceptance.position_rate(source, t) for t in range(i))
        else:
            accept = acceptance.confidence_rate(source, conf)
            reach, self.reach = self.reach, self.reach * accept
            if conf >= self.p_max:
                return 0
        taken, alive = 0, reach * (1.0 - accept)
        for given in chances[: max(0, min(self.width - 1, self.nodes - self.used))]:
            chance = POINT_CHANCE if conf is None else given
            stands = rates.rate(source, chance)
            if self.priced:
                n = batch + self.used + taken
                extra_s = machine.check_s(n + 1) - machine.check_s(n)
                if alive * stands < rate * extra_s:
                    break
            taken += 1
            alive *= 1.0 - stands
        self.used += taken
        return taken


@dataclass(frozen=True)
class TreeSettings:
    """A draft tree's shape limits (engine/policy/branching.py)."""

    nodes: int = 4
    """Alternatives a round verifies at most."""
    p_max: float = 0.9
    """Branch only beside draft tokens drawn with a top probability below this."""
    width: int = 3
    """Candidates at one position at most, the chain's included."""

    def branching(self, priced: bool) -> Branching:
        return Branching(self.nodes, self.p_max, self.width, priced)
