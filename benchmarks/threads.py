"""Threads for the target and for the draft, on a quiet machine and with one core taken by
another program (a busy loop): the speculative reply rate of every pairing, and target-only, so
`--threads` and `--draft-threads` can take what this machine says (docs/benchmark.md).

Each setting runs the same greedy turn from empty caches; the settings take turns in a rotating
order for `--repeats` rounds and medians are reported, quiet and busy rounds alternating, so a
slow spell of the machine falls on every setting alike.

    .venv/bin/python -m benchmarks.threads --repeats 3 --tokens 64
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import numpy as np

from benchmarks import arguments
from specchat.bench.runner import fresh
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import TurnEvent
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.sampling import SamplingParams
from specchat.loading import load_drafter, load_target

PROMPT = "Write a Python function that checks whether a number is prime, with a docstring."
GREEDY = SamplingParams(temperature=0.0)


@contextmanager
def busy_core(on: bool) -> Iterator[None]:
    """One core taken by another program for the block (nothing when not `on`)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if on else None
    try:
        yield
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()


def main() -> int:
    ap = arguments.parser(__doc__, arguments.CPU_ONLY, repeats=3, tokens=64, k=3)
    args = ap.parse_args()
    settings = arguments.settings(args)
    options = settings.models
    targets = {t: load_target(options.target, replace(options, threads=t)) for t in (1, 2)}
    rng = np.random.default_rng(0)
    drafts = {d: load_drafter(options.draft, targets[2], GREEDY, rng, replace(options, draft_threads=d))
              for d in (1, 2)}
    ids = targets[2].tokenize(targets[2].render_chat([("user", PROMPT)]))
    arms: dict[str, SpeculativeEngine] = {}
    for t in (1, 2):
        arms[f"target-only, {t} thread{'s' * (t > 1)}"] = SpeculativeEngine(
            targets[t], NoDrafter(), GREEDY, DraftSettings(k=args.k), rng)
        for d in (1, 2):  # one drafter per thread count, shared: the arms run one at a time
            arms[f"target {t}, draft {d} thread{'s' * (d > 1)}"] = SpeculativeEngine(
                targets[t], drafts[d], GREEDY, DraftSettings(k=args.k), rng)
    rates: dict[tuple[bool, str], list[float]] = {}
    names = list(arms)
    for repeat in range(args.repeats):
        for busy in (False, True) if repeat % 2 == 0 else (True, False):
            with busy_core(busy):
                order = names[repeat % len(names):] + names[:repeat % len(names)]
                for name in order:
                    engine = arms[name]
                    fresh(engine)
                    turn = next(e for e in engine.generate(ids, GenerationSettings(
                        max_tokens=args.tokens, baseline_steps=0)) if isinstance(e, TurnEvent))
                    rates.setdefault((busy, name), []).append(turn.tokens_per_second or 0.0)
        print(f"repeat {repeat + 1}/{args.repeats} done", file=sys.stderr)
    best_quiet = max(statistics.median(rates[(False, n)]) for n in names)
    lines = [f"Greedy, {args.tokens} tokens, k={args.k}, {args.repeats} repeats (medians), "
             f"{options.target} with draft {options.draft}:", "",
             "| setting | quiet (tok/s) | one core busy (tok/s) | busy over quiet |",
             "|---|---|---|---|"]
    for name in names:
        quiet, loaded = (statistics.median(rates[(b, name)]) for b in (False, True))
        lines.append(f"| {name} | {quiet:.2f} | {loaded:.2f} | {loaded / quiet:.2f} |")
    lines += ["", f"(the quiet machine's best: {best_quiet:.2f} tok/s)"]
    table = "\n".join(lines)
    print(table)
    for backend in targets.values():
        backend.close()
    for drafter in drafts.values():
        drafter.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
