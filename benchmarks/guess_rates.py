"""How often a model draft's next tokens are what an n-gram match of the conversation guesses
(engine/guessed_rows.py), by the match's length: the rate that decides whether widening a
draft pass to read the guesses pays (a measurement, not a test). Every prompt of the suite,
greedy, the draft proposing one token a pass; for each round, the guesses the index gives at
its start against the tokens the draft then proposed.

    .venv/bin/python -m benchmarks.guess_rates --k 3 --tokens 160   (from the repository root)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from benchmarks import arguments
from specchat.bench.runner import load_prompts
from specchat.chat.session import ChatSession
from specchat.engine.drafters import ModelDrafter
from specchat.engine.ngram_index import NgramIndex
from specchat.engine.types import Draft, Plan
from specchat.loading import build_engine


class Watched(ModelDrafter):
    """The draft as it is, one token a pass, noting each proposal and the tokens before it."""

    def __init__(self, inner: ModelDrafter) -> None:
        super().__init__(inner.backend, inner.sampling, inner.rng)
        self.rounds: list[tuple[list[int], list[int]]] = []

    def propose(self, committed: Sequence[int], plan: Plan) -> Draft:
        draft = super().propose(committed, plan)
        self.rounds.append((list(committed), list(draft.tokens)))
        return draft


def main() -> int:
    args = arguments.parser(__doc__, k=3, tokens=160, categories="").parse_args()
    settings = arguments.settings(args)
    settings.draft.k, settings.sampling.max_tokens = args.k, args.tokens
    engine = build_engine(settings)
    if not isinstance(engine.drafter, ModelDrafter):
        raise SystemExit("--draft must name a model that shares the target's vocabulary")
    watched = Watched(engine.drafter)
    engine.drafter = watched  # the same model (use_drafter would free it with the old drafter)
    print("| prompt | rounds | match | guessed rounds | first right | first two right "
          "| passes saved a guessed round |\n|---|---|---|---|---|---|---|")
    for p in load_prompts(None, arguments.categories(args)):
        engine.clear_caches()
        watched.rounds.clear()
        for _ in ChatSession(engine).turn(p.text, settings.sampling.generation()):
            pass
        counts: Counter[tuple[str, str]] = Counter()
        index = NgramIndex(1, 12)
        for committed, tokens in watched.rounds:
            index.update(committed)
            start, m = index.match(committed)
            if not m or not tokens:
                continue
            group = "1 token" if m == 1 else "2 or more"
            guess = index.after(start, 2)
            right = next((i for i, (g, t) in enumerate(zip(guess, tokens)) if g != t),
                         min(len(guess), len(tokens)))
            counts[group, "guessed"] += 1
            counts[group, "first"] += right >= 1
            counts[group, "two"] += right >= 2
        for group in ("1 token", "2 or more"):
            n = counts[group, "guessed"]
            saved = (counts[group, "first"] + counts[group, "two"]) / n if n else 0.0
            print(f"| {p.category}/{p.name} | {len(watched.rounds)} | {group} | {n} | "
                  f"{counts[group, 'first']} | {counts[group, 'two']} | {saved:.2f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
