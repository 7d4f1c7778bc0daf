"""Time to first token, with and without reading while typing: messages of about 20, 100 and
400 tokens, typed at a steady 50 characters a second (the benchmark types them), sent to the
target alone and to the default settings (the default draft, guarded k=3), each with and without
both models reading the message as it is typed (`ChatSession.read_ahead`, what the app does on
every keystroke between turns). A fresh conversation each time, both caches empty when typing
starts. The first token's wait is timed from the moment the last character is typed (Enter):
a read still running then is part of it. Medians over the repeats with a 95% interval (a
percentile bootstrap of the median); the arms' order rotates by repeat.

    .venv/bin/python -m benchmarks.ttft_typing --repeats 5 --out docs/guide/first-token.md
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from benchmarks import arguments, tools
from specchat.chat.session import ChatSession
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import TokenEvent, TurnEvent
from specchat.engine.loop import GenerationSettings, SpeculativeEngine
from specchat.engine.sampling import SamplingParams
from specchat.loading import load_drafter, load_target, speculative_engine

CHARS_PER_S = 50.0
LENGTHS = "20,100,400"
REPLY_TOKENS = 8
WORDS = ("Our team keeps a small web service that stores notes for a few hundred users. It runs "
         "on one virtual machine with a PostgreSQL database, a Python application server and a "
         "reverse proxy in front. Backups run every night to object storage, and we restore one "
         "each month to check it. Last week the disk filled up because the log files were never "
         "rotated, and the service stopped answering for two hours before anyone noticed. We "
         "added an alert on free disk space and a cron job that compresses old logs, but the "
         "same kind of problem could come back from somewhere else: the database's write-ahead "
         "log, the temporary files of a large export, or a user who uploads many attachments. "
         "We would rather find a rule that covers all of these than a fix for each one as it "
         "happens. We also want to know, before it hurts, which part of the machine is closest "
         "to its limit, so that we can plan the next upgrade instead of reacting to an outage "
         "in the middle of the night. ").split()
QUESTION = " What would you do?"


def message(engine: SpeculativeEngine, tokens: int) -> str:
    """A message of about `tokens` of the target's tokens: the words above, as many times over
    as it takes, then a question."""
    words: list[str] = []
    while len(engine.target.tokenize(" ".join(words) + QUESTION, special=False)) < tokens:
        words.append(WORDS[len(words) % len(WORDS)])
    return " ".join(words[:-1] if len(words) > 1 else words) + QUESTION


def first_token_s(engine: SpeculativeEngine, text: str, read: bool, chars_per_s: float
                  ) -> tuple[float, TurnEvent]:
    """Type `text` at `chars_per_s` (both models reading it as it grows where `read`), send
    it, and time the first token from the moment its last character was typed."""
    engine.clear_caches()
    session = ChatSession(engine)
    start = time.perf_counter()
    enter = start + len(text) / chars_per_s
    while (now := time.perf_counter()) < enter:
        typed = text[: int((now - start) * chars_per_s)]
        if read and typed.strip():
            session.read_ahead(typed, REPLY_TOKENS)
        else:
            time.sleep(min(0.02, enter - now))
    first, turn = None, None
    for event in session.turn(text, GenerationSettings(max_tokens=REPLY_TOKENS, baseline_steps=0)):
        if isinstance(event, TokenEvent) and first is None:
            first = time.perf_counter() - enter
        elif isinstance(event, TurnEvent):
            turn = event
    assert first is not None and turn is not None
    return first, turn


def interval(values: list[float]) -> str:
    """The median in ms with its 95% interval (percentile bootstrap of the median)."""
    v = np.asarray(values)
    picks = np.random.default_rng(0).integers(0, len(v), (2000, len(v)))
    low, high = np.percentile(np.median(v[picks], axis=1), [2.5, 97.5])
    return f"{statistics.median(values) * 1000:.0f} ({low * 1000:.0f}-{high * 1000:.0f})"


def main() -> None:
    ap = arguments.parser(__doc__, repeats=3, out=None)
    ap.add_argument("--lengths", default=LENGTHS,
                    help="the messages' lengths in tokens, comma-separated (default: %(default)s)")
    ap.add_argument("--chars-per-s", type=float, default=CHARS_PER_S,
                    help="typing speed (default: %(default)s)")
    args = ap.parse_args()
    lengths = [int(n) for n in args.lengths.split(",") if n]
    options = arguments.settings(args).models
    target = load_target(options.target, options)
    rng = np.random.default_rng(0)
    greedy = SamplingParams(temperature=0.0)
    default = arguments.settings(args).draft.engine()
    engines = {"target alone": speculative_engine(target, NoDrafter(), greedy, default, rng),
               "default": speculative_engine(
                   target, load_drafter(options.draft, target, greedy, rng, options), greedy,
                   default, rng)}
    arms = [(name, read) for name in engines for read in (False, True)]
    times: dict[tuple[int, str, bool], list[float]] = {}
    tokens: dict[int, int] = {}
    for rep in range(args.repeats):
        for length in lengths:
            text = message(engines["default"], length)
            for name, read in arms[rep % len(arms):] + arms[: rep % len(arms)]:
                seconds, turn = first_token_s(engines[name], text, read, args.chars_per_s)
                times.setdefault((length, name, read), []).append(seconds)
                tokens[length] = len(turn.prompt_token_ids)
                print(f"{length} tokens · {name}{' · read while typing' if read else ''}: "
                      f"{seconds * 1000:.0f} ms (read ahead {turn.counts.typed_ahead_tokens})",
                      flush=True)
    header = ("| message | prompt tokens | target alone | target alone, read while typing "
              "| default | default, read while typing | default read while typing / target "
              "alone |\n|---|---|---|---|---|---|---|")
    rows = []
    for length in lengths:
        cells = [interval(times[(length, name, read)]) for name, read in arms]
        ratio = (statistics.median(times[(length, "default", True)])
                 / statistics.median(times[(length, "target alone", False)]))
        rows.append(f"| ~{length} tokens typed at {args.chars_per_s:.0f} chars/s | {tokens[length]} | "
                    + " | ".join(cells) + f" | {ratio:.2f} |")
    tools.publish(f"Time to first token after Enter, ms: median (95% interval) of "
                  f"{args.repeats} runs each; {tools.machine_line()}; "
                  f"`python -m benchmarks.ttft_typing --repeats {args.repeats} --lengths "
                  f"{args.lengths} --chars-per-s {args.chars_per_s:g}`.\n\n"
                  + header + "\n" + "\n".join(rows), args.out)


if __name__ == "__main__":
    main()
