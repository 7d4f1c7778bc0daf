"""Does the adaptive policy draft again after a burst of other programs? Side by side in one
run: a fresh adaptive policy writes long prose while two busy loops take both cores, then two
code replies on the quiet machine; the policy as it is (its costs read at the target step as it
is now, `CostModel.step_then`) against the same policy reading every cost as it was learned
(before 2026-12-03), in alternating order.

    .venv/bin/python -m benchmarks.burst_recovery --repeats 3
"""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks import arguments
from specchat.bench.runner import fresh
from specchat.engine.events import RoundEvent, TurnEvent
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.policy import CostModel

PROSE = "Explain in several paragraphs why the sky is blue and sunsets are red, for a curious twelve-year-old."
CODE = ("Write a Python module that implements a binary search tree with insert, delete, search "
        "and in-order traversal. Give every method a docstring.",
        "Write a Python class LRUCache with get and put in O(1), using a dict and a doubly "
        "linked list, with type hints.")
STEP_NOW = CostModel._now


def reply(engine: SpeculativeEngine, text: str, tokens: int) -> str:
    """One reply from empty caches: its rate and how many of its rounds drafted."""
    fresh(engine)
    ids = engine.target.tokenize(engine.target.render_chat([("user", text)]))
    events = list(engine.generate(ids, GenerationSettings(max_tokens=tokens)))
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    turn = events[-1]
    assert isinstance(turn, TurnEvent)
    return (f"{turn.tokens_per_second or 0:.1f} tok/s, drafted in "
            f"{sum(1 for r in rounds if r.drafted)}/{len(rounds)} rounds")


def main() -> int:
    ap = arguments.parser(__doc__, arguments.CPU_ONLY, repeats=3, tokens=96, k=8)
    args = ap.parse_args()
    engine = arguments.greedy_engine(arguments.settings(args).models, args.k)
    shape = engine.policy.costs.shape
    arms = ("costs at the step now", "costs as learned")
    print(f"adaptive k<={args.k}, greedy, {args.tokens} tokens a reply\n")
    print("| policy | prose, both cores busy | code after it | code after it |")
    print("|---|---|---|---|")
    for repeat in range(args.repeats):
        for arm in arms[repeat % 2:] + arms[:repeat % 2]:
            CostModel._now = STEP_NOW if arm == arms[0] else (  # type: ignore[method-assign]
                lambda self, key, seconds: seconds)
            engine.draft_settings = DraftSettings(k=args.k, adaptive=True)
            engine.policy = engine.draft_settings.policy(CostModel(shape=shape))
            busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    for _ in range(2)]
            try:
                burst = reply(engine, PROSE, args.tokens)
            finally:
                for loop in busy:
                    loop.kill()
            time.sleep(1.0)
            after = [reply(engine, text, args.tokens) for text in CODE]
            print(f"| {arm} | {burst} | {after[0]} | {after[1]} |", flush=True)
    CostModel._now = STEP_NOW  # type: ignore[method-assign]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
