"""When a policy that declines to draft tries a round anyway (a probe), so it notices when
drafting starts to pay again; each probe that did not make drafting pay halves how often."""

from __future__ import annotations

from dataclasses import dataclass

PROBE_EVERY, PROBE_MAX = 16, 256
"""After 16 declined rounds, twice as long after each probe that did not pay (up to 256): a
model drafter's probe first catches up on every token it missed, so a probe every 16 rounds
cost a declining reply 5-10% on a 2-core CPU (docs/lab/)."""
PROBE_FIRST = 4
"""Declined rounds at the start of a reply before its first probe."""
PROBE_WHY = "a scheduled probe"
"""Why a probe's round drafts, as the note of where drafting went on again says it."""


@dataclass
class ProbeSchedule:
    every: int = PROBE_EVERY
    since: int = 0
    """Declined rounds since the last probe."""
    probed: bool = False
    """A probe ran since drafting last paid."""

    def declined(self) -> None:
        """A round declined; the last probe did not make drafting pay: probe half as often."""
        if self.probed:
            self.every, self.probed = min(2 * self.every, PROBE_MAX), False
        self.since += 1

    @property
    def due(self) -> bool:
        return self.since >= self.every

    def probe(self) -> None:
        self.since, self.probed = 0, True

    def stopped(self) -> None:
        """Drafting stopped on what its own rounds brought: the rounds declined before they
        ran no longer count toward the next probe, which would only repeat them."""
        self.since = 0

    def paid(self) -> None:
        """Drafting paid: back to the first schedule."""
        self.probed, self.every = False, PROBE_EVERY

    def new_reply(self) -> None:
        """A new message may be another kind of text: the first probe comes after
        `PROBE_FIRST` declined rounds, not after a schedule that grew on prose; the rounds
        declined in the replies before still count, so a run of short replies probes too."""
        self.every, self.probed = PROBE_EVERY, False
        self.since = max(self.since, PROBE_EVERY - PROBE_FIRST)
