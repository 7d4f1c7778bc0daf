"""How often the draft is right at each draft position, on the real pair (a measurement, not a
test): every prompt of the bench suite, greedy, with a long fixed draft, so every position is
tried often.

The rate at position i is conditional: of the rounds whose first i draft tokens all stood and
that drafted an (i+1)-th, the share where it stood too. It is what the expected-accepted-length
formula (`engine.policy.expected_tokens`) takes, so a machine's costs and these rates predict
the speedup at any k there (benchmarks/gpu_check.sh does that on a GPU).

    .venv/bin/python -m benchmarks.acceptance --k 8 --out accept.json   (from the repository root)
"""

from __future__ import annotations

import json

from benchmarks import arguments
from specchat.bench.runner import load_prompts
from specchat.chat.session import ChatSession
from specchat.costs import conditional_rates
from specchat.engine.events import RoundEvent
from specchat.loading import build_engine


def main() -> int:
    args = arguments.parser(__doc__, k=8, tokens=96, categories="", out=None).parse_args()
    settings = arguments.settings(args)
    settings.draft.k, settings.sampling.max_tokens = args.k, args.tokens
    engine = build_engine(settings)
    pairs: list[tuple[int, int]] = []
    prompts = load_prompts(None, arguments.categories(args))
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
