"""What the policy knows of the reply being written, and forgets when the next one begins: what
it writes (code or text), the target's running confidence, what each source's rounds brought,
whether a source's last pass was empty."""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from specchat.engine.policy.rates import Recent, Yield, conf_bin
from specchat.engine.text_kind import TEXT

LENGTHS_KEPT = 9
"""Replies whose lengths say how long the next one may run."""
TARGET_CONF_EMA, TARGET_CONF_MIN = 0.3, 3
"""The target's running confidence (its top probability at each committed position) weighs
each new position 0.3, so it follows the last few tokens; it counts once 3 positions of the
reply are in it (the prompt's last row and two steps)."""
SURE_AT, SURE_RUN = 0.9, 8
"""The target is sure of the text where its running confidence stands at 0.9 or more, and has
stayed sure where it did so 8 positions in a row: four lists did by their 12th-34th positions
and the suite's domain replies by their 17th and 127th; one of twelve prose replies did, by its
127th (docs/lab/2026-12-07-a-list-is-not-prose.md)."""


class Where(NamedTuple):
    """A draft source in a kind of text (engine/text_kind.py): what the target's confidence
    predicts and what rounds brought are kept for each apart, since the same confidence meant
    0.39 of the 0.5B draft's tokens standing in prose and 0.96 in code (docs/lab/)."""

    source: str
    kind: str


@dataclass
class ReplyState:
    kind: str = TEXT
    """What the reply writes where the round begins (`writing`)."""
    target_conf: float | None = None
    """The target's running confidence: an EMA of its top probability at each committed
    position (None until the reply's first row)."""
    target_conf_n: int = 0
    """Positions of this reply in `target_conf`."""
    sure_run: int = 0
    """Positions in a row, up to now, at which the running confidence stood at `SURE_AT` or
    more."""
    realized: dict[tuple[Where, int], Yield] = field(default_factory=dict)
    """Tokens a second each source's drafting rounds brought in this reply (a catch-up on
    missed tokens left out: it is paid once), by where and by the bin of the running
    confidence the round began with: the check on the predictions."""
    recent: dict[Where, Recent] = field(default_factory=dict)
    """What each source's last drafting rounds in this reply brought, by kind of text (a
    catch-up left out), whatever the confidence: the guarded policy's evidence."""
    last_empty: dict[str, bool] = field(default_factory=dict)
    """Whether each source's latest pass ended in no draft."""

    def where(self, source: str) -> Where:
        return Where(source, self.kind)

    @property
    def conf_bin(self) -> int | None:
        return None if self.target_conf is None else conf_bin(self.target_conf)

    @property
    def confident_enough(self) -> bool:
        """The running confidence has seen enough of the reply to predict by."""
        return self.target_conf is not None and self.target_conf_n >= TARGET_CONF_MIN

    @property
    def stayed_sure(self) -> bool:
        """The target has been sure of the text for `SURE_RUN` positions in a row (a list, a
        table: text the draft keeps up with, unlike prose)."""
        return self.sure_run >= SURE_RUN

    def move_confidence(self, confs: Sequence[float]) -> None:
        """Move the running confidence on by a round's committed positions."""
        for conf in confs:
            old = self.target_conf
            self.target_conf = conf if old is None else old + TARGET_CONF_EMA * (conf - old)
            self.target_conf_n += 1
            self.sure_run = self.sure_run + 1 if self.target_conf >= SURE_AT else 0

    def realized_here(self, source: str) -> Yield | None:
        """What `source`'s rounds brought at the present running confidence."""
        at = self.conf_bin
        return None if at is None else self.realized.get((self.where(source), at))


@dataclass
class ReplyLengths:
    """How many tokens the last replies ran (kept across conversations, like the machine's
    costs): how far ahead a draft model's catch-up can be earned back in the reply now."""

    recent: deque[int] = field(default_factory=lambda: deque(maxlen=LENGTHS_KEPT))

    def add(self, tokens: int) -> None:
        if tokens > 0:
            self.recent.append(tokens)

    def left(self, written: int) -> int:
        """Tokens a reply that has `written` so far may still run: the median length of the
        last replies less `written` (0 before any reply has ended)."""
        return max(0, round(statistics.median(self.recent)) - written) if self.recent else 0
