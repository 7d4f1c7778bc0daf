"""The combined drafter: n-gram lookup first, a draft model otherwise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specchat.engine.backend import Backend
from specchat.engine.model_drafter import ModelDrafter
from specchat.engine.ngram_drafter import NgramDrafter
from specchat.engine.sampling import SamplingParams
from specchat.engine.text_drafter import TextDrafter
from specchat.engine.types import Draft, Plan


class CombinedDrafter:
    """The n-gram drafter's proposal when the conversation offers a match the policy wants to
    use, the draft model's otherwise (llama.cpp runs its speculation types in priority order the
    same way): one setting for chat and for editing."""

    speculates = True

    def __init__(self, ngram: NgramDrafter, drafter: ModelDrafter | TextDrafter) -> None:
        self.ngram, self.drafter = ngram, drafter
        self.name = f"{ngram.name}+{drafter.name}"

    @property
    def passes(self) -> int:
        return self.drafter.passes

    @property
    def model(self) -> Backend:
        return self.drafter.backend

    def propose(self, committed: Sequence[int], plan: Plan) -> Draft:
        draft = self.ngram.propose(committed, plan)
        return draft if draft.tokens else self.drafter.propose(committed, plan)

    def release(self, committed: Sequence[int]) -> None:
        self.drafter.release(committed)

    def read(self, committed: Sequence[int]) -> int:
        return self.drafter.read(committed)

    def configure(self, sampling: SamplingParams, rng: np.random.Generator) -> None:
        self.drafter.configure(sampling, rng)

    def close(self) -> None:
        self.drafter.close()
