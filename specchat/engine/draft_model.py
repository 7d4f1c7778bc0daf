"""What the drafters with a model of their own share: the model, how it draws, and freeing it."""

from __future__ import annotations

import numpy as np

from specchat.engine.backend import Backend
from specchat.engine.sampling import SamplingParams


class DraftModel:
    """A drafter's own model: its passes counted, its sampling set per round, freed at close."""

    speculates = True

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
