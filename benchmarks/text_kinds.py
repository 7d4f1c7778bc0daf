"""How often the draft's tokens stood inside ``` blocks and outside them, and by the target's
running confidence: a fixed-k arm over the suite (every round drafts, so every level is
tested), each round filed by what the reply was writing where it began (engine/text_kind.py).
The table behind docs/benchmark.md, "Code blocks and prose".

    .venv/bin/python -m benchmarks.text_kinds --k 3
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from benchmarks import arguments
from specchat.bench.runner import Arm, BenchRunner, fresh, load_prompts
from specchat.engine.events import RoundEvent, TokenEvent, TokenKind
from specchat.engine.loop import DraftSettings, GenerationSettings
from specchat.engine.sampling import SamplingParams
from specchat.engine.text_kind import text_kind
from specchat.loading import load_drafter, load_target

CONF_EDGES = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98)


def level(conf: float | None) -> str:
    if conf is None:
        return "-"
    below = [edge for edge in CONF_EDGES if conf >= edge]
    return f">={below[-1]}" if below else f"<{CONF_EDGES[0]}"


def main() -> None:
    args = arguments.parser(__doc__, k=3, categories="").parse_args()
    options = arguments.settings(args).models
    target = load_target(options.target, options)
    drafter = load_drafter(options.draft, target, SamplingParams(), np.random.default_rng(0),
                           options)
    runner = BenchRunner(target, {options.draft: drafter},
                         [Arm(options.draft, DraftSettings(k=args.k))])
    _, engine = runner.engines[0]
    tally: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for prompt in load_prompts(None, arguments.categories(args)):
        fresh(engine)
        text, kind = "", text_kind("")
        for event in engine.generate(runner.prompt_ids(prompt),
                                     GenerationSettings(max_tokens=prompt.max_tokens or 96)):
            if isinstance(event, TokenEvent) and event.kind is not TokenKind.REJECTED:
                text += event.text
            elif isinstance(event, RoundEvent):
                if event.round > 0:
                    for filed in ((prompt.category, kind), (kind, level(event.target_conf))):
                        counts = tally[filed]
                        counts[0] += 1
                        counts[1] += event.drafted
                        counts[2] += event.accepted
                        counts[3] += event.emitted
                kind = text_kind(text)  # the next round begins after this one's tokens
    print("| where the round began | rounds | draft tokens that stood | tokens a round |")
    print("|---|---|---|---|")
    for key, (rounds, drafted, stood, emitted) in sorted(tally.items()):
        print(f"| {' / '.join(key)} | {rounds} | {stood / max(drafted, 1):.0%} | "
              f"{emitted / rounds:.2f} |")


if __name__ == "__main__":
    main()
