"""What a round's verification decided, as one value: the chain's rule (verify.py) and the
tree's (tree.py) both return an `Outcome`, and the round (round.py) commits it."""

from __future__ import annotations

from dataclasses import dataclass, field

from specchat.engine.events import TokenKind


@dataclass(frozen=True)
class Checked:
    """One draft token as verification saw it."""

    row: int
    """The logits row of the verify pass it was checked at."""
    token: int
    q: float
    """The drafter's probability of it."""
    u: float | None
    """The uniform it was tested with (sampling; None in greedy mode or where not tested)."""
    depth: int
    """Its draft position (0: right after the committed tokens)."""
    on_branch: bool = False
    """A draft tree's alternative, off the chain."""


@dataclass(frozen=True)
class Outcome:
    """The draft tokens that stood (in order), those refused, and the target's own next token
    (a correction, the bonus, or a plain step's)."""

    stood: list[Checked]
    refused: list[Checked]
    next_row: int
    next_token: int
    kind: TokenKind
    """What the next token is: TARGET (no draft), CORRECTED or BONUS."""
    chain_accepted: int
    """The chain's draft tokens that stood (the policy's acceptance by position)."""
    branch: int | None = None
    """The branch of a draft tree that stood, if one did (its index in `Draft.branches`)."""
    branches_tested: int = 0
    """Alternatives tested where the chain was refused, up to the one that stood."""
    kept: list[int] = field(default_factory=list)
    """A draft tree's nodes that stood (their cache entries stay); empty for a chain."""

    @property
    def rows(self) -> list[int]:
        """The rows of the positions the round committed."""
        return [c.row for c in self.stood] + [self.next_row]
