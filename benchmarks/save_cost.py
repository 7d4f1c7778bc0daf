"""Does saving the reply as it grows slow decoding? (a benchmark, not a test)

One engine on the default pair (or --target/--draft), the same prompts, back to back, the way
`specchat chat` runs a turn: the engine in a worker thread, the renderer and the history
sink on the main thread. Each repeat runs every prompt three ways, in a rotating order: no
history sink, the `ReplyRecorder` saving at most every second (what `chat` and the app do), and
saving after every token (the worst case), each into a scratch history file. Reported: reply
tokens over the turn's wall time as the consumer saw it, the ratio to no sink, and the seconds
spent writing per second of reply.

    .venv/bin/python -m benchmarks.save_cost --repeats 3 --tokens 128
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks import arguments
from benchmarks.tools import publish
from specchat.bench.runner import load_prompts
from specchat.chat.history import HistoryStore, ReplyRecorder
from specchat.chat.session import ChatSession, Conversation
from specchat.chat.worker import in_worker
from specchat.engine.events import Event, TurnEvent
from specchat.loading import build_engine
from specchat.settings import SamplingOptions

MODES = {"no history sink": None, "saved every 1 s (default)": 1.0, "saved every token": 0.0}


def one_turn(session: ChatSession, text: str, tokens: int, every_s: float | None,
             store: HistoryStore) -> tuple[float, float, int]:
    """(tokens per second of wall time, seconds writing, tokens) of one turn from empty
    caches."""
    session.engine.clear_caches()
    session.conversation = Conversation()
    recorder = None
    if every_s is not None:
        cid = store.new_conversation("bench", "", "")
        recorder = ReplyRecorder(store, cid, every_s)

    def turn(cancel: threading.Event) -> Iterator[Event]:
        return session.turn(text, SamplingOptions(max_tokens=tokens).generation(), cancel)

    t0 = time.perf_counter()
    last = None
    for event in in_worker(turn):
        if recorder is not None:
            recorder(event)
        last = event
    wall = time.perf_counter() - t0
    assert isinstance(last, TurnEvent)
    return last.n_tokens / wall, recorder.write_s if recorder else 0.0, last.n_tokens


def main() -> int:
    ap = arguments.parser(__doc__, sections=("models", "draft"), repeats=3, tokens=128, out=None)
    ap.add_argument("--prompts", type=int, default=3, help="prompts from the suite")
    args = ap.parse_args()
    settings = arguments.settings(args)
    engine = build_engine(settings)
    session = ChatSession(engine)
    prompts = load_prompts()[: args.prompts]
    store = HistoryStore(Path(tempfile.mkdtemp()) / "history.sqlite3")
    one_turn(session, "Say hello.", 16, None, store)  # warm-up
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    writes: dict[str, list[float]] = {m: [] for m in MODES}
    names = list(MODES)
    for r in range(args.repeats):
        for i, prompt in enumerate(prompts):
            shift = (r + i) % len(names)
            for mode in names[shift:] + names[:shift]:
                rate, write_s, n = one_turn(session, prompt.text, args.tokens, MODES[mode], store)
                rates[mode].append(rate)
                writes[mode].append(write_s / (n / rate) if n else 0.0)
                print(f"repeat {r + 1} {prompt.name:<20} {mode:<26} {rate:6.2f} tok/s, "
                      f"writing {1000 * write_s:.1f} ms", flush=True)
    base = rates[names[0]]
    lines = [f"Saving the reply as it grows ({engine.target.name} with {engine.drafter.name}, "
             f"{args.repeats} repeats x {len(prompts)} prompts, {args.tokens} tokens; "
             "`python -m benchmarks.save_cost`):", "",
             "| history sink | median tok/s (wall) | median ratio to no sink | writing, share "
             "of the turn |", "|---|---|---|---|"]
    for mode in names:
        ratio = statistics.median(a / b for a, b in zip(rates[mode], base))
        lines.append(f"| {mode} | {statistics.median(rates[mode]):.2f} | {ratio:.3f} | "
                     f"{100 * statistics.median(writes[mode]):.3f}% |")
    publish("\n".join(lines), args.out)
    engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
