"""How far llama.cpp's batch-dependent rounding moves a model's top-2 logit gap: the figure the
greedy oracles' near-tie ceiling (tests/support/checks.py, NEAR_TIE_CEILING) is set from. For each
model, on the calibration prompts' target-only continuations, the largest change of the gap
between one-token-at-a-time evaluation and batches of 2, 3, 5 and 8, with llama.cpp's repacked
weights and without them (the path specchat's patches do not touch). And how far the two paths'
logits part for batches of 1-40 tokens on one and two threads (as a share of the largest logit):
the figure the patch tests' tolerance (tests/backends/test_llama_patches.py) is set from.

    .venv/bin/python -m benchmarks.batching_drift MODEL.gguf [MODEL.gguf ...] [--tokens 24]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specchat.backends.llamacpp import LlamaCppBackend
from specchat.backends.repack import batch_gaps, model_params
from specchat.engine.compare import batching_gap_drift
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import turn_of
from specchat.engine.loop import GenerationSettings, SpeculativeEngine
from specchat.engine.sampling import SamplingParams
from specchat.native import model_thread

PROMPTS = ["hello world", "the cat sat on", "0123456789", "speculative decoding",
           "def fibonacci(n):", "Write a haiku about the sea."]


def drift(path: Path, repack: bool, tokens: int) -> float:
    """The largest gap change over the prompts, the model loaded with or without repacking."""
    with model_params(use_extra_bufts=int(repack)):
        model = LlamaCppBackend(path, n_ctx=1024, n_gpu_layers=0)
    worst = 0.0
    for text in PROMPTS:
        ids = model.tokenize(text, special=False)
        turn = turn_of(SpeculativeEngine(model, NoDrafter(), SamplingParams()).generate(
            ids, GenerationSettings(max_tokens=tokens)))
        worst = max(worst, batching_gap_drift(model, ids, turn.token_ids))
    model.close()
    return worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().split("\n\n")[0])
    ap.add_argument("models", type=Path, nargs="+")
    ap.add_argument("--tokens", type=int, default=24, help="target-only tokens a prompt")
    args = ap.parse_args()
    model_thread.adopt()
    print("| model | gap drift, repacked | gap drift, unrepacked | paths apart, 1 thread | "
          "2 threads |\n|---|---|---|---|---|")
    for path in args.models:
        print(f"| {path.name} | {drift(path, True, args.tokens):.4f} | "
              f"{drift(path, False, args.tokens):.4f} | {max(batch_gaps(path, 1)):.2%} | "
              f"{max(batch_gaps(path, 2)):.2%} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
