"""The small value types the engine's parts hand each other: a drafter's `Draft`, the round's
`Plan` a drafter asks how far to draft, the `RowSummary` of one logits row, the `FittedPrompt` a
caller makes when a reply reaches the end of the context, and the `MachineWatch` a caller
measures the machine with around a turn.

They live apart from the code that makes them so that the drafters, the policy and the loop
can all name them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np


class FittedPrompt(NamedTuple):
    """A shorter prompt for a reply that reached the end of the context: the caller's answer
    when the engine asks it to make room (chat/context.py decides what is left out)."""

    prompt_ids: list[int]
    left_out: int
    """Turns of the conversation the new prompt leaves out."""


class MachineWatch(Protocol):
    """What the caller measures of the machine around a turn (specchat/cpu.py on this
    machine): the engine asks, it never reads the machine itself."""

    def begin(self) -> int | None:
        """Before the turn's clock starts: the CPU threads the turn's models should use (None:
        leave them as they are)."""
        ...

    def end(self) -> float | None:
        """After the turn: the share of the machine's CPU other programs used since `begin`
        (None: not measured)."""
        ...


class RowSummary(NamedTuple):
    """What verification and the stats need of one logits row."""

    top: int
    """The argmax token id."""
    gap: float
    """Top-1 minus top-2 logit (how near a tie the greedy choice was)."""
    lse: float
    """log-sum-exp of the row: p(token) = exp(logit - lse)."""


@dataclass
class Branch:
    """Draft tokens off the main chain (a draft tree): its first token is an alternative to the
    chain's token at `at`, drawn after it and any earlier branch at `at` (without replacement:
    never one of theirs), the rest continue it. Verified in the same target pass."""

    at: int
    tokens: list[int]
    q: list[float]
    """The drafter's probability of each token, as for the chain."""
    dists: list[np.ndarray] | None = None
    """The distribution each token was drawn from, before the earlier siblings' tokens were
    taken out (sampling with a model drafter); None means point masses."""


@dataclass
class DraftCost:
    """What a draft model's passes cost in making a draft, apart from what it proposes."""

    behind: int = 0
    """Committed tokens a draft model had to catch up on before drafting."""
    catchup_s: float = 0.0
    """Seconds its catch-up pass took (it also yields the first draft token's row)."""
    widened: bool = False
    """That pass also read guessed tokens or padding (engine/guessed_rows.py), so its seconds
    are not the catch-up's alone."""
    later_draws: int = 0
    """Tokens drawn, kept or refused, from the rows of the passes after that one: what those
    passes' seconds bought. One a pass, except where a pass also read guessed tokens that the
    draft then proposed."""


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    q: list[float] = field(default_factory=list)
    """The drafter's probability of each proposed token."""
    dists: list[np.ndarray] | None = None
    """Full draft distributions (sampling with a model drafter); None means point masses."""
    source: str = ""
    """Which drafter (and for the n-gram drafter, which match length) proposed it; the policy
    keeps its statistics per source."""
    conf: list[float] = field(default_factory=list)
    """The drafter's confidence in each token (its top probability); empty for drafters that
    have none."""
    uses_passes: bool = False
    """The drafter ran a model pass per token (its cost grows with the length)."""
    cost: DraftCost = field(default_factory=DraftCost)
    """What making it cost (the policy learns the drafter's costs from it)."""
    own_pieces: list[str] = field(default_factory=list)
    """The draft model's own tokens as it wrote them, where its vocabulary is not the target's
    (it drafts as text); empty otherwise, where they are `tokens`."""
    branches: list[Branch] = field(default_factory=list)
    """Alternatives off the chain `tokens` (a draft tree, engine/tree.py), in the order they
    were drawn; empty for a chain."""

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def nodes(self) -> int:
        """Draft tokens the target verifies: the chain's and its branches'."""
        return len(self.tokens) + sum(len(b.tokens) for b in self.branches)

    @property
    def caught_up(self) -> int:
        """Tokens its pass read beyond the round's own one or two (the last correction or
        bonus, and the draft token before it): the prompt, or rounds it sat out; 0 where no
        pass ran (a declined round falls behind without one)."""
        return max(0, self.cost.behind - 2) if self.cost.catchup_s > 0 else 0

    @property
    def drafter_ran(self) -> bool:
        """A drafter brought tokens, or a model ran a pass that kept none."""
        return bool(self.tokens) or self.cost.catchup_s > 0


class Plan(Protocol):
    """One round's drafting budget, asked by the drafter as it drafts."""

    declined: bool
    """The policy chose not to draft this round although the drafter could have."""
    why: str
    """Why it declined, from what it measured (empty where it drafts)."""
    resumed: str
    """Why it drafts again where its last round drafted nothing (empty where it did not
    decline before, or does not say)."""
    asked: int
    """The draft length the plan last allowed (the k of the round)."""
    @property
    def width(self) -> int:
        """Candidates a draft position may have in a draft tree, the chain's included (1: the
        round drafts a chain)."""
        ...

    @property
    def p_branch(self) -> float:
        """A draft tree branches only beside tokens drawn with a top probability below this."""
        ...

    def k(self, source: str, uses_passes: bool, behind: int = 0) -> int:
        """How many tokens `source` may draft this round (0: do not draft); a model drafter
        says how many committed tokens it must catch up on first."""
        ...

    def keep(self, source: str, i: int, conf: float) -> bool:
        """Whether draft token i, proposed with confidence `conf`, should be kept (and
        drafting go on)."""
        ...

    def batch_for(self, n: int) -> int:
        """The verify batch to run for `n` tokens (padded where a larger batch costs less)."""
        ...

    def worth_a_pass(self, source: str, i: int) -> bool:
        """Whether a model drafter should run the pass that proposes token i (after keeping
        token i - 1): False where no confidence it could come with would keep it."""
        ...

    def alternatives(self, source: str, i: int, conf: float | None, chances: list[float]) -> int:
        """How many alternatives to kept draft token i (confidence `conf`; None for a drafter
        without one) to verify beside it, a branch each (0: a chain there); `chances`: each
        alternative's chance of being right once the tokens before it at i were refused, as the
        drafter knew it before drawing that alternative (branching.py)."""
        ...
