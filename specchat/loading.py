"""From what the user typed (--target, --draft, settings) to a ready engine.

One place resolves names, checks draft compatibility before any weights load, and builds the
drafter, so `ask`, `chat`, the TUI and the benchmark all get the same checks and messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specchat.backends.base import Backend
from specchat.backends.llamacpp import NO_TRUNCATION, LlamaCppBackend
from specchat.catalog import compat
from specchat.catalog.catalog import Catalog, models_dir, resolve_model
from specchat.engine.drafters import CombinedDrafter, Drafter, ModelDrafter, NgramDrafter, NoDrafter
from specchat.engine.loop import DraftSettings, SpeculativeEngine
from specchat.engine.sampling import SamplingParams
from specchat.errors import CacheTruncationError, IncompatibleDraftError, SpecchatError


@dataclass
class ModelOptions:
    n_ctx: int = 4096
    threads: int | None = None
    target_gpu_layers: int | None = None
    """None: every layer on the GPU where llama.cpp has a GPU backend, else 0."""
    draft_gpu_layers: int | None = None
    ngram_n: int = 3
    """Shortest n-gram match the n-gram drafter proposes from."""
    ngram_n_max: int = 12
    """Longest match it looks for first; each length is a draft source of its own."""
    backend: str = "llamacpp"
    """llamacpp, or transformers (torch; checkpoint folders or GGUF files)."""
    device: str | None = None
    """transformers: cpu, cuda or mps (default: the first available of cuda, mps, cpu)."""
    dtype: str = "auto"
    """transformers: float32, bfloat16 or float16 (auto: bfloat16 on cuda, float16 on mps,
    float32 on cpu)."""


BACKENDS = ("llamacpp", "transformers")


def load_model(path: Path, options: ModelOptions, n_ctx: int, gpu_layers: int | None) -> Backend:
    """One model on the backend the options name."""
    if options.backend == "transformers":
        from specchat.backends.hf import TransformersBackend

        return TransformersBackend(path, models_dir(), n_ctx=n_ctx, device=options.device,
                                   dtype=options.dtype, n_threads=options.threads)
    if options.backend != "llamacpp":
        raise SpecchatError(f"backend {options.backend!r}: choose one of {', '.join(BACKENDS)}")
    return LlamaCppBackend(path, n_ctx=n_ctx, n_gpu_layers=gpu_layers, n_threads=options.threads)


def load_target(spec: str, options: ModelOptions, catalog: Catalog | None = None) -> Backend:
    path = resolve_model(spec, "target", catalog)
    return load_model(path, options, options.n_ctx, options.target_gpu_layers)


def load_drafter(
    spec: str,
    target: Backend,
    sampling: SamplingParams,
    rng: np.random.Generator,
    options: ModelOptions,
    catalog: Catalog | None = None,
) -> Drafter:
    """`none`, `ngram`, a model (path, catalog name, `default`) checked against the target, or
    `ngram+MODEL`: n-gram matches first, the model otherwise."""
    if spec == "none":
        return NoDrafter()
    if not target.can_truncate:
        raise CacheTruncationError(f"{target.name}: {NO_TRUNCATION}")
    ngram = NgramDrafter(options.ngram_n, options.ngram_n_max)
    if spec == "ngram":
        return ngram
    if spec.startswith("ngram+"):
        model = load_drafter(spec.removeprefix("ngram+"), target, sampling, rng, options, catalog)
        if not isinstance(model, ModelDrafter):
            raise SpecchatError(f"{spec}: after 'ngram+' name a draft model (a GGUF path, a "
                                "catalog name or 'default')")
        return CombinedDrafter(ngram, model)
    path = resolve_model(spec, "draft", catalog)
    headers = path.suffix == ".gguf" and target.path.suffix == ".gguf"
    if headers:  # judged from the headers, before any weights load
        _compatible(compat.check(target.path, path), path, target)
    backend = load_model(path, options, target.n_ctx, options.draft_gpu_layers)
    if not headers:
        verdict = compat.check_loaded(target, backend)
        if not verdict.ok:
            backend.close()
        _compatible(verdict, path, target)
    if not backend.can_truncate:
        backend.close()
        raise CacheTruncationError(f"{backend.name}: {NO_TRUNCATION}")
    return ModelDrafter(backend, sampling, rng)


def _compatible(verdict: compat.Compatibility, path: Path, target: Backend) -> None:
    if not verdict.ok:
        raise IncompatibleDraftError(
            f"{path.name} cannot draft for {target.path.name}: {verdict.reason}")


def build_engine(
    target_spec: str,
    draft_spec: str,
    sampling: SamplingParams,
    draft: DraftSettings,
    options: ModelOptions,
) -> SpeculativeEngine:
    catalog = Catalog.load()
    target = load_target(target_spec, options, catalog)
    rng = np.random.default_rng(sampling.seed)
    drafter = load_drafter(draft_spec, target, sampling, rng, options, catalog)
    return SpeculativeEngine(target, drafter, sampling, draft, rng)
