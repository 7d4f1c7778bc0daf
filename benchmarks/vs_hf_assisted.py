"""specchat's transformers backend against Hugging Face assisted generation (a benchmark, not a test).

On the default pair loaded through transformers (the GGUFs converted once into the models
folder), greedy, the same prompts and the same k, back to back per prompt and repeat:
  - `model.generate()` target-only and `model.generate(assistant_model=draft,
    num_assistant_tokens=k, num_assistant_tokens_schedule="constant",
    assistant_confidence_threshold=0)`: the reference implementation;
  - specchat's engine on the transformers backend, target-only and with the draft model at k;
  - specchat's engine on the llama.cpp backend with the draft model at k.
Rates are end to end (prompt included: generated tokens over wall seconds), the only rate
`generate()` offers; it does not report an acceptance rate either, so that column is specchat's
alone. Outputs are compared token by token.

    .venv/bin/python -m benchmarks.vs_hf_assisted --repeats 2 --tokens 64 --k 3 --out docs/transformers.md
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
import torch

from benchmarks import arguments
from benchmarks.tools import publish
from specchat.backends.hf import TransformersBackend
from specchat.bench.runner import load_prompts
from specchat.engine.backend import user_turn
from specchat.engine.compare import first_divergence
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import turn_of
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.sampling import SamplingParams
from specchat.loading import load_drafter, load_target

PROMPTS = ("short/http-codes", "code/bst", "domain/sql")
GREEDY = SamplingParams()


@dataclass
class Result:
    tokens: list[int]
    seconds: float
    acceptance: float | None

    @property
    def rate(self) -> float:
        return len(self.tokens) / self.seconds


def hf_generate(target: TransformersBackend, draft: TransformersBackend | None, ids: list[int],
                n: int, k: int) -> Result:
    extra = {}
    if draft is not None:
        extra = {"assistant_model": draft.model, "num_assistant_tokens": k,
                 "num_assistant_tokens_schedule": "constant",
                 "assistant_confidence_threshold": 0.0}
    inputs = torch.tensor([ids])
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = target.model.generate(inputs, attention_mask=torch.ones_like(inputs),
                                    max_new_tokens=n, do_sample=False, **extra)
    seconds = time.perf_counter() - t0
    tokens = out[0, len(ids):].tolist()
    while tokens and target.is_eog(tokens[-1]):
        tokens.pop()
    return Result(tokens, seconds, None)


def specchat_generate(engine: SpeculativeEngine, ids: list[int], n: int) -> Result:
    engine.clear_caches()
    turn = turn_of(engine.generate(ids, GenerationSettings(max_tokens=n)))
    return Result(turn.token_ids, turn.counts.wall_s, turn.counts.acceptance_rate)


def main() -> int:
    args = arguments.parser(__doc__, arguments.CPU_ONLY, repeats=2, tokens=64, k=3,
                            out=None).parse_args()
    ll_options = arguments.settings(args).models
    threads = arguments.threads(ll_options)

    rng = np.random.default_rng(0)
    hf_options = replace(ll_options, threads=threads, backend="transformers", device="cpu",
                         dtype="float32")
    hf_t, ll_t = load_target(hf_options.target, hf_options), load_target(ll_options.target, ll_options)
    hf_drafter = load_drafter(hf_options.draft, hf_t, GREEDY, rng, hf_options)
    ll_drafter = load_drafter(ll_options.draft, ll_t, GREEDY, rng, ll_options)
    hf_d = hf_drafter.model
    assert isinstance(hf_t, TransformersBackend) and isinstance(hf_d, TransformersBackend)
    arms = {
        "HF generate, target only": lambda ids: hf_generate(hf_t, None, ids, args.tokens, args.k),
        f"HF assisted generation, k={args.k}":
            lambda ids: hf_generate(hf_t, hf_d, ids, args.tokens, args.k),
        "specchat transformers, target only":
            lambda ids: specchat_generate(SpeculativeEngine(hf_t, NoDrafter(), GREEDY), ids,
                                          args.tokens),
        f"specchat transformers, k={args.k}":
            lambda ids: specchat_generate(SpeculativeEngine(
                hf_t, hf_drafter, GREEDY, DraftSettings(k=args.k)), ids, args.tokens),
        f"specchat llama.cpp, k={args.k}":
            lambda ids: specchat_generate(SpeculativeEngine(
                ll_t, ll_drafter, GREEDY, DraftSettings(k=args.k)), ids, args.tokens),
    }
    wanted = [p for p in load_prompts() if f"{p.category}/{p.name}" in PROMPTS]
    results: dict[str, list[Result]] = {a: [] for a in arms}
    same: list[str] = []
    for repeat in range(args.repeats):
        for prompt in wanted:
            ids = user_turn(hf_t, prompt.text)
            got = {}
            for arm, fn in arms.items():
                got[arm] = fn(ids)
                results[arm].append(got[arm])
                print(f"r{repeat} {prompt.name} {arm}: {got[arm].rate:.2f} tok/s", file=sys.stderr,
                      flush=True)
            if repeat == 0:
                hf, ours = got[f"HF assisted generation, k={args.k}"], \
                    got[f"specchat transformers, k={args.k}"]
                at = first_divergence(hf.tokens, ours.tokens)
                same.append(f"{prompt.category}/{prompt.name}: "
                            + ("identical" if at is None else f"first differ at token {at}"))

    def rate(arm: str) -> float:
        return sum(len(r.tokens) for r in results[arm]) / sum(r.seconds for r in results[arm])

    base = rate("HF generate, target only")
    lines = [
        f"Default pair through transformers {__import__('transformers').__version__} / torch "
        f"{torch.__version__} (float32, cpu, {threads} threads) and through llama.cpp; "
        f"greedy, {args.tokens} tokens, k={args.k}, prompts {', '.join(PROMPTS)}, "
        f"{args.repeats} repeat(s), all arms back to back per prompt. End-to-end rates "
        "(prompt included).",
        "",
        "| arm | tok/s | vs HF target only | acceptance |",
        "|---|---|---|---|",
    ]
    for arm in arms:
        acc = [r.acceptance for r in results[arm] if r.acceptance is not None]
        lines.append(f"| {arm} | {rate(arm):.2f} | {rate(arm) / base:.2f}x | "
                     f"{statistics.fmean(acc):.0%} |" if acc else
                     f"| {arm} | {rate(arm):.2f} | {rate(arm) / base:.2f}x | – |")
    ratio = rate(f"specchat transformers, k={args.k}") / rate(f"HF assisted generation, k={args.k}")
    lines += ["", f"specchat transformers / HF assisted generation: {ratio:.2f}x. "
                  "generate() does not report its acceptance.",
              "Outputs, HF assisted vs specchat transformers (k the same, greedy): "
              + "; ".join(same) + "."]
    table = "\n".join(lines)
    publish(table, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
