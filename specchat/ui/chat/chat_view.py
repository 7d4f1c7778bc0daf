"""The chat screen's view: the conversation column (transcript, step panel, legend, status line,
input box) and the stats panel beside it, and what a turn does to them (a reply opened, rounds
drawn, the turn's numbers, a failure). It holds no conversation and runs no model: the screen
hands it what to show."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from specchat.engine.events import Event, RoundEvent, TurnEvent
from specchat.engine.stats import TurnStats
from specchat.ui.widgets.legend import Legend
from specchat.ui.widgets.prompt_input import PromptInput
from specchat.ui.widgets.stats_panel import StatsPanel
from specchat.ui.widgets.step_panel import StepPanel, describe_round
from specchat.ui.widgets.transcript import Transcript

NUMBERS_EVERY = 2
"""A streaming reply's live numbers are redrawn at every this many redraws of its text (once a
second on two cores): a dozen of their lines change at each, and each costs a render, on the
CPU that llama.cpp would have had (docs/lab/2026-12-08-one-layout-pass-a-step.md). The turn's
final numbers, and each round in step-through, are drawn at once."""


class ChatView(Horizontal):
    def __init__(self) -> None:
        super().__init__(id="main")
        self.status_text = ""
        self.redraws = 0
        """Redraws of the reply in flight that drew new tokens."""

    def compose(self) -> ComposeResult:
        with Vertical(id="chat"):
            yield Transcript(id="transcript")
            yield StepPanel(id="step")
            yield Legend()
            yield Static("loading models…", id="status")
            yield PromptInput(id="prompt")
        yield StatsPanel(id="side")

    @property
    def transcript(self) -> Transcript:
        return self.query_one(Transcript)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one(PromptInput)

    def set_status(self, text: str) -> None:
        self.status_text = text
        self.query_one("#status", Static).update(text, layout=False)  # one fixed line

    def take_input(self, ok: bool) -> None:
        """Enable the input box and give it the keys (it was disabled while models loaded, so
        a closing menu could not hand it the focus back, and typing went nowhere), or disable
        it."""
        self.prompt.disabled = not ok
        if ok:
            self.prompt.focus()

    def open_reply(self, text: str, stepping: bool) -> None:
        """The user's message and an empty reply under it."""
        self.transcript.open_reply(text)
        if stepping:
            self.query_one(StepPanel).focus()
        self.prompt.cursor_blink = False  # a blink redraw costs generation time
        self.redraws = 0
        self.set_status("generating… (Esc stops)")

    def start(self, draft: str, server: bool) -> None:
        """A conversation opened: empty numbers, and for a llama-server the legend says that
        its rejections are counted, not shown."""
        if server:
            self.query_one(Legend).show(counted_rejections=True)
        self.query_one(StatsPanel).show(TurnStats(), draft)
        self.take_input(True)

    def draw(self, events: list[Event], stepping: bool, draft: str) -> None:
        """A round's events in the transcript; in step-through the round laid out in the step
        panel and drawn at once; at the turn's end its numbers."""
        self.transcript.take(events)
        side = self.query_one(StatsPanel)
        if stepping and any(isinstance(e, RoundEvent) for e in events):
            self.query_one(StepPanel).update(describe_round(events, side.baseline))
            self.redraw(draft, numbers=True)
        if turn := next((e for e in events if isinstance(e, TurnEvent)), None):
            if turn.counts.baseline_tokens_per_second:
                side.set_baseline(turn.counts.baseline_tokens_per_second, turn.counts.baseline_source)
            side.show(self.transcript.stats, turn.draft, final=turn)
            self.prompt.cursor_blink = True

    def redraw(self, draft: str | None, numbers: bool = False) -> None:
        """The reply's new tokens, and while a turn runs (`draft` not None) its live numbers,
        at every `NUMBERS_EVERY` redraws from the first, or with `numbers` now."""
        if self.transcript.redraw() and draft is not None:
            if numbers or not self.redraws % NUMBERS_EVERY:
                self.query_one(StatsPanel).show(self.transcript.stats, draft)
            self.redraws += 1

    def fail(self, error: str, message: str | None) -> None:
        """A failed turn: the open reply says why, and its message goes back into an empty
        input box, so Enter sends it again."""
        self.transcript.fail(error)
        if not self.prompt.text.strip():
            self.prompt.text = message or ""

    def switch_steps(self, stepping: bool, replying: bool) -> None:
        """Step-through on (the panel takes Space while a reply runs) or off."""
        panel = self.query_one(StepPanel)
        panel.switch(stepping)
        if stepping and replying:
            panel.focus()
        elif not stepping:
            self.prompt.focus()
        self.set_status("step-through on (F5 turns it off)" if stepping else "step-through off")
