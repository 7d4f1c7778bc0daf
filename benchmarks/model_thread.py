"""What running every llama.cpp pass on one thread buys (specchat/native/model_thread.py), side by
side in one run: target-only turns of the default target, each started on a thread of its own
as the app's workers and `specchat chat` start them, with the passes handed to the model thread
(`eval`, what specchat does) or run on the turn's own thread (the backend's `_eval`, what it
did before). In the second arm libgomp keeps a thread pool for the turn's thread beside the
model thread's, more threads than cores, and its barriers sleep instead of spinning.

Also with speculation (--k > 0, the default draft): both models' passes the same way.

    .venv/bin/python -m benchmarks.model_thread --repeats 4 --tokens 128
"""

from __future__ import annotations

import statistics
import sys
import threading
from collections.abc import Callable
from typing import Any

from benchmarks import arguments
from specchat.backends.llamacpp import LlamaCppBackend
from specchat.engine.events import TurnEvent
from specchat.engine.loop import GenerationSettings

PROMPT = "Write a Python function that checks whether a number is prime, with a docstring."


def on_new_thread(fn: Callable[[], Any]) -> Any:
    """`fn()` on a thread started for it, as a front end's worker runs a turn."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join()
    return out[0]


def passes_on_caller(models: list[LlamaCppBackend]) -> Callable[[], None]:
    """Make each model run its passes on whatever thread asks (as before the model thread);
    the returned function undoes it."""
    for model in models:
        model.eval = model._eval  # type: ignore[method-assign]

    def undo() -> None:
        for model in models:
            del model.eval

    return undo


def main() -> int:
    ap = arguments.parser(__doc__, arguments.CPU_ONLY, repeats=4, tokens=128, k=0)
    args = ap.parse_args()
    options = arguments.settings(args).models
    engine = arguments.greedy_engine(options, args.k, draft=args.k > 0)
    target = engine.target
    models = [m for m in (target, engine.drafter.model) if isinstance(m, LlamaCppBackend)]
    ids = target.tokenize(target.render_chat([("user", PROMPT)]))

    def turn() -> float:
        engine.clear_caches()
        return next(e for e in engine.generate(ids, GenerationSettings(max_tokens=args.tokens))
                    if isinstance(e, TurnEvent)).tokens_per_second or 0.0

    arms = ("passes on the model thread", "passes on the turn's thread")
    rates: dict[str, list[float]] = {arm: [] for arm in arms}
    for repeat in range(args.repeats):
        for arm in arms[repeat % 2:] + arms[:repeat % 2]:
            undo = passes_on_caller(models) if arm == arms[1] else None
            rates[arm].append(on_new_thread(turn))
            if undo:
                undo()
        print(f"repeat {repeat + 1}/{args.repeats} done", file=sys.stderr)
    what = f"k={args.k}, {options.draft}" if args.k else "target only"
    print(f"{what}, greedy, {args.tokens} tokens, {args.repeats} repeats, each turn on a new "
          "thread:\n")
    print("| passes | decode tok/s (each repeat) | median |")
    print("|---|---|---|")
    for arm in arms:
        print(f"| {arm} | {', '.join(f'{r:.2f}' for r in rates[arm])} | "
              f"{statistics.median(rates[arm]):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
