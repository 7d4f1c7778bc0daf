"""How often the draft is right at each draft position, on the real pair (a measurement, not a
test): every prompt of the bench suite, greedy, with a long fixed draft, so every position is
tried often.

The rate at position i is conditional: of the rounds whose first i draft tokens all stood and
that drafted an (i+1)-th, the share where it stood too. It is what the expected-accepted-length
formula (`engine.policy.expected_tokens`) takes, so a machine's costs and these rates predict
the speedup at any k there (bench/gpu_check.sh does that on a GPU).

    .venv/bin/python -m specchat.bench.acceptance --k 8 --out accept.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path

from specchat.bench.runner import load_prompts
from specchat.chat.session import ChatSession
from specchat.engine.events import RoundEvent
from specchat.loading import build_engine
from specchat.settings import DraftOptions, ModelOptions, SamplingOptions, Settings


def conditional_rates(rounds: Iterable[tuple[int, int]], k: int) -> list[tuple[float, int]]:
    """(rate, rounds it is taken over) at each position, from (drafted, accepted) per round."""
    tried, stood = [0] * k, [0] * k
    for drafted, accepted in rounds:
        for i in range(min(drafted, k)):
            if accepted < i:
                break
            tried[i] += 1
            stood[i] += accepted > i
    return [(s / t if t else 0.0, t) for s, t in zip(stood, tried)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--draft", default="default")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--categories", default="")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    settings = Settings(ModelOptions(draft=args.draft), DraftOptions(k=args.k),
                        SamplingOptions(max_tokens=args.max_tokens))
    engine = build_engine(settings)
    pairs: list[tuple[int, int]] = []
    prompts = load_prompts(None, [c for c in args.categories.split(",") if c])
    for p in prompts:
        engine.clear_caches()
        for event in ChatSession(engine).turn(p.text, settings.sampling.generation()):
            if isinstance(event, RoundEvent) and event.drafted:
                pairs.append((event.drafted, event.accepted))
        print(f"{p.category}/{p.name}: {len(pairs)} drafting rounds so far", flush=True)
    rates = conditional_rates(pairs, args.k)
    for i, (rate, n) in enumerate(rates):
        print(f"position {i + 1}: {rate:.3f} over {n} rounds")
    if args.out:
        args.out.write_text(json.dumps({
            "target": engine.target.name, "draft": engine.drafter.name, "k": args.k,
            "prompts": len(prompts), "rounds": len(pairs),
            "accept_by_position": [round(r, 4) for r, _ in rates],
            "rounds_by_position": [n for _, n in rates]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
