"""Drafters: whatever proposes the next few tokens for the target to check.

All share one interface (`Drafter`) so a menu can swap them mid-conversation: `propose(committed, plan)`
returns a `Draft`, asking the round's `Plan` (engine/policy/) how far to draft and whether to
keep each token; `release(committed)` forgets what the target refused. A model drafter keeps
its own KV cache in step with the committed tokens; the n-gram drafter keeps an index of the
conversation; the combined drafter takes an n-gram match when there is one and the model's draft
otherwise; `NoDrafter` proposes nothing (target only, the baseline). One module each:
model_drafter.py, ngram_drafter.py, combined_drafter.py, text_drafter.py (another vocabulary).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from specchat.engine.backend import Backend
from specchat.engine.sampling import SamplingParams
from specchat.engine.types import Draft, Plan

NO_DRAFT = "none"
"""The name of target-only decoding: the drafter that proposes nothing, as settings, the bench's
arms and the events spell it."""


class Drafter(Protocol):
    name: str
    speculates: bool
    """Whether it ever proposes a token (False: target only, the baseline)."""

    @property
    def passes(self) -> int:
        """Forward passes of a draft model (0 for drafters without one)."""
        ...

    @property
    def model(self) -> Backend | None:
        """The draft model's backend, if the drafter has one (compatibility checks read it)."""
        ...

    def propose(self, committed: Sequence[int], plan: Plan) -> Draft: ...

    def release(self, committed: Sequence[int]) -> None: ...

    def read(self, committed: Sequence[int]) -> int:
        """Off the reply's clock, read `committed` but its last token, as the next proposal
        would first (`kvsync.read`); the tokens read (0 without a model)."""
        ...

    def configure(self, sampling: SamplingParams, rng: np.random.Generator) -> None:
        """Draw with these sampling settings and this generator from the next round on."""
        ...

    def close(self) -> None:
        """Free the draft model, if any; the drafter is not used again."""
        ...


class NoModel:
    """What the drafters without a model of their own share: nothing to configure or free."""

    passes = 0
    model: Backend | None = None
    speculates = True

    def configure(self, sampling: SamplingParams, rng: np.random.Generator) -> None:
        pass

    def read(self, committed: Sequence[int]) -> int:
        return 0

    def close(self) -> None:
        pass


class NoDrafter(NoModel):
    """Target only: every round is one plain target step."""

    name = NO_DRAFT
    speculates = False

    def propose(self, committed: Sequence[int], plan: Plan) -> Draft:
        return Draft()

    def release(self, committed: Sequence[int]) -> None:
        pass
