"""From what the user typed (--target, --draft, settings) to a ready engine.

One place resolves names, checks draft compatibility before any weights load, and builds the
drafter, so `ask`, `chat`, the TUI and the benchmark all get the same checks and messages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specchat.backends.llamacpp import NO_TRUNCATION, LlamaCppBackend
from specchat.catalog import compat
from specchat.catalog.catalog import Catalog, resolve_model
from specchat.engine.drafters import Drafter, ModelDrafter, NgramDrafter, NoDrafter
from specchat.engine.loop import DraftSettings, SpeculativeEngine
from specchat.engine.sampling import SamplingParams
from specchat.errors import CacheTruncationError, IncompatibleDraftError


@dataclass
class ModelOptions:
    n_ctx: int = 4096
    threads: int | None = None
    target_gpu_layers: int | None = None
    """None: every layer on the GPU where llama.cpp has a GPU backend, else 0."""
    draft_gpu_layers: int | None = None
    ngram_n: int = 3


def load_target(spec: str, options: ModelOptions, catalog: Catalog | None = None) -> LlamaCppBackend:
    path = resolve_model(spec, "target", catalog)
    return LlamaCppBackend(path, n_ctx=options.n_ctx, n_gpu_layers=options.target_gpu_layers,
                           n_threads=options.threads)


def load_drafter(
    spec: str,
    target: LlamaCppBackend,
    sampling: SamplingParams,
    rng: np.random.Generator,
    options: ModelOptions,
    p_min: float = 0.0,
    catalog: Catalog | None = None,
) -> Drafter:
    """`none`, `ngram`, or a model (path, catalog name, `default`) checked against the target."""
    if spec == "none":
        return NoDrafter()
    if not target.can_truncate:
        raise CacheTruncationError(f"{target.name}: {NO_TRUNCATION}")
    if spec == "ngram":
        return NgramDrafter(options.ngram_n)
    path = resolve_model(spec, "draft", catalog)
    verdict = compat.check(target.path, path)
    if not verdict.ok:
        raise IncompatibleDraftError(
            f"{path.name} cannot draft for {target.path.name}: {verdict.reason}"
        )
    backend = LlamaCppBackend(path, n_ctx=target.n_ctx, n_gpu_layers=options.draft_gpu_layers,
                              n_threads=options.threads)
    if not backend.can_truncate:
        backend.close()
        raise CacheTruncationError(f"{backend.name}: {NO_TRUNCATION}")
    return ModelDrafter(backend, sampling, rng, p_min)


def build_engine(
    target_spec: str,
    draft_spec: str,
    sampling: SamplingParams,
    draft: DraftSettings,
    options: ModelOptions,
    p_min: float = 0.0,
) -> SpeculativeEngine:
    catalog = Catalog.load()
    target = load_target(target_spec, options, catalog)
    rng = np.random.default_rng(sampling.seed)
    drafter = load_drafter(draft_spec, target, sampling, rng, options, p_min, catalog)
    return SpeculativeEngine(target, drafter, sampling, draft, rng)
