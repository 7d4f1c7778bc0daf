"""What the drafters with a model of their own share: the model, how it draws, and freeing it."""

from __future__ import annotations

import numpy as np

from specchat.engine.backend import Backend
from specchat.engine.sampling import SamplingParams
from specchat.engine.types import Plan


class DraftModel:
    """A drafter's own model: its passes counted, its sampling set per round, freed at close."""

    def __init__(self, backend: Backend, sampling: SamplingParams,
                 rng: np.random.Generator) -> None:
        self.backend = backend
        self.sampling, self.rng = sampling, rng

    @property
    def passes(self) -> int:
        return self.backend.passes

    @property
    def model(self) -> Backend:
        return self.backend

    def configure(self, sampling: SamplingParams, rng: np.random.Generator) -> None:
        self.sampling, self.rng = sampling, rng

    def close(self) -> None:
        self.backend.close()

    def next_row(self, plan: Plan, name: str, tok: int, i: int, k: int) -> np.ndarray | None:
        """After keeping draft token i (`tok`): the draft's row for token i + 1, from one pass;
        None where the draft is k tokens long or the plan finds that pass not worth running."""
        if i + 1 == k or not plan.worth_a_pass(name, i + 1):
            return None
        return self.backend.eval([tok], 0)[0]
