"""llama.cpp's repacked CPU weights against the weights as the file holds them: loading a model
with llama.cpp's default model parameters changed (`model_params`), and how far the two paths'
logits part for batches of every size (`batch_gaps`, what the patch tests and
benchmarks.batching_drift hold to their tolerance)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np


@contextmanager
def model_params(**fields: int) -> Iterator[None]:
    """Within it, every `llama_model_default_params()` comes back with `fields` set: specchat's
    backend's and llama_cpp.Llama's (which reads it from the module beneath). No field imports
    nothing."""
    if not fields:
        yield
        return
    import llama_cpp
    from llama_cpp import llama_cpp as low

    default = low.llama_model_default_params
    saved = llama_cpp.llama_model_default_params, low.llama_model_default_params

    def changed() -> Any:
        params = default()
        for name, value in fields.items():
            setattr(params, name, value)
        return params

    llama_cpp.llama_model_default_params = low.llama_model_default_params = changed
    try:
        yield
    finally:
        llama_cpp.llama_model_default_params, low.llama_model_default_params = saved


def batch_gaps(path: Path, threads: int) -> list[float]:
    """For batches of 1 to 40 random tokens after a 7-token prefix, how far the repacked and
    unrepacked paths' logits of the same batch part, as a share of the largest logit."""
    from specchat.backends.llamacpp import LlamaCppBackend  # model_params alone needs no build

    with model_params(use_extra_bufts=1):
        packed = LlamaCppBackend(path, n_ctx=256, n_threads=threads, n_gpu_layers=0)
    with model_params(use_extra_bufts=0):
        plain = LlamaCppBackend(path, n_ctx=256, n_threads=threads, n_gpu_layers=0)
    rng = np.random.default_rng(threads)
    prefix = [int(t) for t in rng.integers(3, 255, 7)]
    gaps = []
    for size in range(1, 41):
        batch = [int(t) for t in rng.integers(3, 255, size)]
        rows = []
        for model in (packed, plain):
            model.truncate(0)
            model.eval(prefix, len(prefix))
            rows.append(model.eval(batch, 0))
        gaps.append(float(np.abs(rows[0] - rows[1]).max() / np.abs(rows[1]).max()))
    packed.close()
    plain.close()
    return gaps
