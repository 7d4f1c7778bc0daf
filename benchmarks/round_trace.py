"""Each round of target-only, fixed-k and adaptive arms over suite prompts, run as `specchat
bench` runs them (interleaved, from empty caches, one engine per arm): what the policy chose,
what stood, and the draft and verify seconds of every round. A diagnostic, not a test: it shows
where a reply's time went (a catch-up on the prompt, passes whose token was not kept). After
each speculative reply, and over all of an arm's, a line adds it up: seconds catching the draft
up, seconds of passes that brought no draft, and what drafting rounds lost and won against as
many of the target-only arm's steps (its seconds a token on the same prompt) as tokens they
brought.

    .venv/bin/python -m benchmarks.round_trace --categories short --draft default --k 3
    .venv/bin/python -m benchmarks.round_trace --prompts benchmarks/prompts/prose.toml
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from benchmarks import arguments
from specchat.bench.runner import Arm, BenchRunner, fresh, load_prompts
from specchat.engine.events import RoundEvent, TurnEvent
from specchat.engine.loop import DraftSettings, GenerationSettings
from specchat.engine.sampling import SamplingParams
from specchat.loading import load_drafter, load_target

ADAPTIVE_K_MAX = 8
"""The adaptive arm's longest draft, as the suite in docs/benchmark.md runs it."""


def round_line(e: RoundEvent) -> str:
    conf = "-" if e.target_conf is None else f"{e.target_conf:.2f}"
    caught = f" catch-up={e.catchup_tokens} in {e.catchup_s * 1000:.1f} ms" if e.catchup_tokens else ""
    return (f"  r{e.round:<3d} k={e.k} drafted={e.drafted} stood={e.accepted}"
            f"{' declined' if e.declined else ''}{caught} draft={e.draft_s * 1000:.1f} ms "
            f"verify={e.verify_s * 1000:.1f} ms target-conf={conf}")


def time_went(rounds: list[RoundEvent], step_s: float) -> dict[str, float]:
    """Seconds of a reply's rounds after its first: catching the draft up, passes that brought
    no draft, and drafting rounds' seconds beyond (lost) or short of (won) `step_s` a token
    they brought (the catch-up left out: it is counted apart)."""
    went = dict.fromkeys(("catch-up", "empty passes", "drafting lost", "drafting won"), 0.0)
    for e in rounds[1:]:
        if e.declined or not e.k:
            continue
        went["catch-up"] += e.catchup_s
        if not e.drafted:
            went["empty passes"] += e.draft_s
            continue
        net = e.draft_s - e.catchup_s + e.verify_s - (e.accepted + 1) * step_s
        went["drafting lost" if net > 0 else "drafting won"] += abs(net)
    return went


def went_line(went: dict[str, float]) -> str:
    return "  time went: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in went.items())


def main() -> None:
    args = arguments.parser(__doc__, k=3, repeats=1, categories="short", prompts=None).parse_args()
    options = arguments.settings(args).models
    target = load_target(options.target, options)
    drafters = {name: load_drafter(name, target, SamplingParams(), np.random.default_rng(0),
                                   options) for name in ("none", options.draft)}
    arms = [Arm("none"), Arm(options.draft, DraftSettings(k=args.k)),
            Arm(options.draft, DraftSettings(k=ADAPTIVE_K_MAX, adaptive=True))]
    runner = BenchRunner(target, drafters, arms)
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for _ in range(args.repeats):
        for prompt in load_prompts(args.prompts, arguments.categories(args)):
            ids = runner.prompt_ids(prompt)
            settings = GenerationSettings(max_tokens=prompt.max_tokens or 96)
            for arm, engine in runner.engines:
                fresh(engine)
                events = list(engine.generate(ids, settings))
                turn = next(e for e in events if isinstance(e, TurnEvent))
                print(f"{prompt.category}/{prompt.name} · {arm.label}: {turn.n_tokens} tokens "
                      f"in {turn.decode_s:.2f} s, {turn.tokens_per_second or 0:.2f} tok/s")
                if arm.drafter == "none":
                    step_s = turn.decode_s / max(1, turn.n_tokens - 1)
                    continue
                rounds = [e for e in events if isinstance(e, RoundEvent)]
                for e in rounds:
                    print(round_line(e))
                went = time_went(rounds, step_s)
                print(went_line(went))
                for key, seconds in went.items():
                    totals[arm.label][key] += seconds
    for label, went in totals.items():
        print(f"{label}, all replies:", went_line(went).strip())


if __name__ == "__main__":
    main()
