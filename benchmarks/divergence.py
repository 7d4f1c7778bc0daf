"""How often a greedy speculative reply parts from the target-only reply (not a test).

For each prompt: a target-only greedy reply and one per drafter, on the default pair. Each pair
of replies is compared up to its first divergence (after it the texts differ anyway); the rate
is divergences per 1,000 tokens compared, and each divergence is listed with the target-only
top-2 logit gap at that position and the batching drift measured on this pair.

    .venv/bin/python -m benchmarks.divergence --tokens 128 --out docs/divergence.md
"""

from __future__ import annotations

import numpy as np

from benchmarks import arguments
from specchat.chat.session import ChatSession
from specchat.engine.compare import batching_gap_drift, divergence
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import TokenEvent, turn_of
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.ngram_drafter import NgramDrafter
from specchat.engine.sampling import SamplingParams
from specchat.loading import load_drafter, load_target
from specchat.settings import ModelOptions, Settings

PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain what a hash map is in three sentences.",
    "List five uses of the Linux command grep, with an example each.",
    "Write a SQL query that finds the ten customers with the highest total order value.",
    "What is the difference between a process and a thread?",
    "Write a bash script that renames every .txt file in a folder to .md.",
    "Explain recursion to a beginner, with a small example in JavaScript.",
    "Write a Rust function that returns the n-th Fibonacci number iteratively.",
    "Describe three ways to speed up a slow SQL query.",
    "Write a Python class for a stack with push, pop and peek.",
]


def main() -> int:
    args = arguments.parser(__doc__, Settings(ModelOptions(n_ctx=2048)), tokens=128, k=3,
                            out=None).parse_args()
    greedy = SamplingParams()
    options = arguments.settings(args).models
    target = load_target(options.target, options)
    drafters = {
        "0.5B draft": load_drafter(options.draft, target, greedy, np.random.default_rng(0), options),
        "n-gram": NgramDrafter(3),
    }
    settings = GenerationSettings(max_tokens=args.tokens)
    compared = {name: 0 for name in drafters}
    found: list[str] = []
    drift = 0.0
    for i, prompt in enumerate(PROMPTS):
        base_events = list(ChatSession(SpeculativeEngine(target, NoDrafter(), greedy)).turn(
            prompt, settings))
        base = turn_of(base_events)
        base_tokens = [e for e in base_events if isinstance(e, TokenEvent)]
        if i < 3:
            drift = max(drift, batching_gap_drift(target, base.prompt_token_ids,
                                                  base.token_ids[:48], (2, 4)))
        for name, drafter in drafters.items():
            engine = SpeculativeEngine(target, drafter, greedy, DraftSettings(k=args.k))
            turn = turn_of(ChatSession(engine).turn(prompt, settings))
            parted = divergence(target, base, base_tokens, turn)
            compared[name] += parted[0] if parted else min(base.counts.n_tokens, turn.counts.n_tokens)
            if parted:
                found.append(f"| {i} | {name} | {parted[0]} | {parted[1]:.3f} |")
        print(f"prompt {i}: {len(found)} divergences so far", flush=True)
    n_div = {name: sum(f"| {name} |" in line for line in found) for name in drafters}
    lines = [
        f"Default pair, {len(PROMPTS)} prompts, up to {args.tokens} greedy tokens, k={args.k}. "
        f"Batching drift of the top-2 logit gap measured on this pair: up to {drift:.3f}.",
        "",
        "| drafter | tokens compared | divergences | per 1,000 tokens |",
        "|---|---|---|---|",
        *[f"| {name} | {compared[name]} | {n_div[name]} | "
          f"{1000 * n_div[name] / max(compared[name], 1):.1f} |" for name in drafters],
        "",
        "| prompt | drafter | first divergent token | target-only top-2 gap there |",
        "|---|---|---|---|",
        *found,
    ]
    table = "\n".join(lines)
    print(table)
    if args.out:
        head = args.out.read_text().split("<!-- measured -->")[0] if args.out.exists() else ""
        args.out.write_text(head + "<!-- measured -->\n" + table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
