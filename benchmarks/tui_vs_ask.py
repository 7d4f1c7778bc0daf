"""Does the TUI slow generation? Decode tok/s inside the app against `specchat ask` (a benchmark,
not a test).

Each repeat runs `specchat ask --json` (a separate process, as a user runs it) and then the
Textual app headless (Pilot: it lays out and renders every update, just not to a real
terminal), same prompt, draft, k and greedy sampling, on the default pair, in an order that
alternates by repeat, each with a new empty history, so that neither starts from what the policy
learned before (chat/learned.py) nor writes to the user's. Both report the engine's own decode
rate (`tokens_per_second` of the turn); the ratio is taken per repeat.
It also reads the CPU seconds the UI thread used while the reply ran, a second of reply: on two
cores what the UI draws is taken from llama.cpp's threads, and that share is less noisy than
the rates.

A process's own rate moves by up to a third from one process to the next on a small machine,
more than the UI costs. `--one-process` takes that away: one app process, its models loaded
once, each repeat a reply typed into the app and the same reply made with no UI drawing
(`ChatState.turn` on the model thread, every event taken and none drawn, as `ask --json` does),
each in a new conversation, in an order that alternates by repeat, after a first reply that is
not counted (the policy's first reply in a process starts from nothing measured).

    .venv/bin/python -m benchmarks.tui_vs_ask --repeats 3 --tokens 96
    .venv/bin/python -m benchmarks.tui_vs_ask --one-process --repeats 6 --tokens 1024
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from benchmarks import arguments
from benchmarks.policy_ab import ask_events
from specchat.chat.history import HistoryStore
from specchat.chat.state import ChatState
from specchat.engine.events import TurnCounts, TurnEvent
from specchat.engine.loop import GenerationSettings
from specchat.native import model_thread
from specchat.settings import POLICIES, DraftOptions, SamplingOptions, Settings
from specchat.ui.app import SpecchatApp
from specchat.ui.launch import Launch
from specchat.ui.widgets.prompt_input import PromptInput

T = TypeVar("T")

PROMPT = "Write a Python function that parses an ISO 8601 date string, with a docstring."


def ask_rate(prompt: str, tokens: int, draft: DraftOptions) -> tuple[float, int]:
    """`ask`'s decode rate, and the tokens its reply ran."""
    turn = ask_events(prompt, ["--k", str(draft.k), "--policy", draft.policy,
                               "--max-tokens", str(tokens)])[-1]
    return turn["tokens_per_second"], turn["n_tokens"]


def in_app(tokens: int, draft: DraftOptions, run: Callable[[Any, Settings], Awaitable[T]]) -> T:
    """What `run(pilot, settings)` returns, in a headless app (Pilot: it lays out and renders
    every update, just not to a real terminal) with a history of its own, once its models are
    loaded."""
    scratch = tempfile.mkdtemp()  # keep bench chats out of the user's history
    settings = Settings(draft=draft, sampling=SamplingOptions(max_tokens=tokens))
    app = SpecchatApp(settings, Launch(warm_up=False),
                      HistoryStore(Path(scratch) / "history.sqlite3"))

    async def main() -> T:
        async with app.run_test(size=(140, 45)) as pilot:
            screen = app.chat_screen
            while screen.chat is None or screen.query_one(PromptInput).disabled:
                await pilot.pause(0.1)
            return await run(pilot, settings)

    return asyncio.run(main())


def tui_rate(prompt: str, tokens: int, draft: DraftOptions) -> tuple[float, int, float]:
    """The app's decode rate, the tokens its reply ran, and the CPU seconds its UI thread used
    a second of the reply."""
    counts, ui_share = in_app(tokens, draft, lambda pilot, _settings: app_turn(pilot, prompt))
    return counts.tokens_per_second or 0.0, counts.n_tokens, ui_share


def work(counts: TurnCounts) -> str:
    """What a reply did: whether two replies compared did the same work."""
    return (f"{counts.n_tokens} tokens, {counts.rounds} rounds, "
            f"{counts.n_accepted}/{counts.n_drafted} drafts stood")


async def app_turn(pilot: Any, prompt: str) -> tuple[TurnCounts, float]:
    """A reply typed into the app in a new conversation: its counts, and the CPU seconds the UI
    thread used a second of the reply."""
    screen = pilot.app.chat_screen
    screen.action_new_chat()
    screen.transcript.last_turn = None
    screen.query_one(PromptInput).text = prompt
    cpu, wall = time.thread_time(), time.perf_counter()
    await pilot.press("enter")
    while screen.transcript.last_turn is None:  # a plain sleep: pilot.pause() would make the app
        await asyncio.sleep(0.25)  # wait for idle and add work a real user never does
    ui_share = (time.thread_time() - cpu) / (time.perf_counter() - wall)
    counts = screen.transcript.last_turn.counts
    while screen.busy:  # the turn's worker ends after its last message
        await asyncio.sleep(0.05)
    return counts, ui_share


def bare_turn(chat: ChatState, prompt: str, generation: GenerationSettings) -> TurnCounts:
    """The same reply with no UI drawing, in a new conversation, on the model thread (after
    whatever the app left there, such as its catch-up): its counts."""
    def run() -> TurnEvent:
        chat.new()
        events = list(chat.turn(prompt, generation))
        return next(e for e in events if isinstance(e, TurnEvent))
    return model_thread.call(run).counts  # the UI's loop waits here: nothing is drawn meanwhile


def one_process(prompt: str, tokens: int, draft: DraftOptions,
                repeats: int) -> list[tuple[TurnCounts, float, TurnCounts]]:
    """Each repeat's (the app's counts, its UI share, the no-UI reply's counts), in one app
    process."""
    async def run(pilot: Any, settings: Settings) -> list[tuple[TurnCounts, float, TurnCounts]]:
        chat, generation = pilot.app.chat_screen.chat, settings.sampling.generation()
        bare_turn(chat, prompt, generation)  # not counted: a process's first reply starts cold
        rows = []
        for r in range(repeats):
            if r % 2:
                bare = bare_turn(chat, prompt, generation)
            tui, ui_share = await app_turn(pilot, prompt)
            if not r % 2:
                bare = bare_turn(chat, prompt, generation)
            rows.append((tui, ui_share, bare))
        return rows

    return in_app(tokens, draft, run)


Row = tuple[str, float, str, float, str, float]
"""A repeat as reported: what the app is held against, its rate and what it did, the app's rate
and what it did, and the UI thread's share of a core."""


def process_rows(args: Any) -> Iterator[Row]:
    """`ask` and the app, each a process of its own."""
    for r in range(args.repeats):
        if r % 2:
            tui, tui_n, ui_share = tui_rate(args.prompt, args.tokens, draft(args))
        ask, ask_n = ask_rate(args.prompt, args.tokens, draft(args))
        if not r % 2:
            tui, tui_n, ui_share = tui_rate(args.prompt, args.tokens, draft(args))
        yield "ask", ask, f"{ask_n} tokens", tui, f"{tui_n} tokens", ui_share


def one_process_rows(args: Any) -> Iterator[Row]:
    """The app and the same reply with no UI drawing, in one process."""
    for tui, ui_share, bare in one_process(args.prompt, args.tokens, draft(args), args.repeats):
        yield ("no UI", bare.tokens_per_second or 0.0, work(bare), tui.tokens_per_second or 0.0,
               work(tui), ui_share)


def draft(args: Any) -> DraftOptions:
    return DraftOptions(k=args.k, policy=args.policy)


def main() -> int:
    ap = arguments.parser(__doc__, None, repeats=3, tokens=96, k=3)
    ap.add_argument("--prompt", default=PROMPT, help="the message (default: a code request; "
                    "for a reply that runs to --tokens, ask for a long list)")
    ap.add_argument("--policy", choices=POLICIES, default=DraftOptions().policy,
                    help="the draft policy of both arms (default: %(default)s; fixed: both do the "
                    "same work, so the ratio is the UI's own cost)")
    ap.add_argument("--one-process", action="store_true", help="both arms in one app process: "
                    "the app's reply against the same reply with no UI drawing")
    args = ap.parse_args()
    # both sides on one scratch config that asks nothing on a first run: the layout offer's
    # dialog would take the app's Enter, and `ask` is offered nothing
    config = Path(tempfile.mkdtemp()) / "config.toml"
    config.write_text('[models]\noptimize_offer = "never"\n')
    os.environ["SPECCHAT_CONFIG"] = str(config)
    ratios, shares = [], []
    rows = one_process_rows(args) if args.one_process else process_rows(args)
    for r, (other, other_rate, other_did, tui, tui_did, ui_share) in enumerate(rows):
        ratios.append(tui / other_rate)
        shares.append(ui_share)
        print(f"repeat {r + 1}: {other} {other_rate:.2f} tok/s ({other_did}), TUI {tui:.2f} "
              f"tok/s ({tui_did}), ratio {tui / other_rate:.3f}, "
              f"UI thread {ui_share:.1%} of a core", flush=True)
    against = "no-UI decode tok/s, one process" if args.one_process else "ask decode tok/s"
    print(f"median TUI/{against}: {statistics.median(ratios):.3f} (goal >= 0.97); "
          f"UI thread: median {statistics.median(shares):.1%} of a core while the reply ran")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
