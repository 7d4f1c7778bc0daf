"""The chat screen: transcript, stats panel, step panel and prompt, and the turn that feeds them.

Model work runs in thread workers that call the `ModelHost` and post messages (ui/messages.py)
with what they made; this screen's state changes only in their handlers, on the UI thread.
Whether it is busy is read off its running workers. Esc sets the turn's cancel flag; the engine
ends the turn after the round in flight with both caches consistent, and the partial reply is
kept and marked as stopped. Loading and swapping models is its base's, `ModelLoading`.
"""

from __future__ import annotations

import threading
import time

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import Footer, Header, Static

from specchat.chat.history import HistoryStore
from specchat.chat.state import ChatState
from specchat.engine.events import ContextEvent, RoundEvent, TurnEvent
from specchat.engine.loop import SpeculativeEngine
from specchat.errors import SpecchatError
from specchat.host import ModelHost
from specchat.render import context_note, slower_why
from specchat.settings import Settings
from specchat.trace import Lane, Trace, lane_label
from specchat.ui.history_screen import HistoryScreen
from specchat.ui.launch import Launch
from specchat.ui.messages import EventBatch, RaceReady, StatusLine, WorkerFailed
from specchat.ui.model_loading import ModelLoading
from specchat.ui.pacing import StepGate, round_batches
from specchat.ui.palette import draft_commands
from specchat.ui.race_screen import RaceScreen
from specchat.ui.slides import TurnSlide
from specchat.ui.step_panel import EXPLAIN, StepPanel, describe_round
from specchat.ui.transcript import Transcript
from specchat.ui.why_screen import K_MAX, WhyScreen
from specchat.ui.widgets import Legend, PromptInput, StatsPanel

REDRAW_S = 0.25


class ChatScreen(ModelLoading):
    BINDINGS = [
        Binding("escape", "stop", "Stop reply"),
        # priority: the prompt (a TextArea) would take ctrl+d as "delete right" otherwise
        Binding("ctrl+d", "draft_menu", "Draft", priority=True),
        Binding("ctrl+t", "target_menu", "Target", priority=True),
        Binding("ctrl+r", "toggle_rejected", "Rejected on/off", priority=True),
        Binding("ctrl+n", "new_chat", "New chat", priority=True),
        Binding("ctrl+o", "history", "History", priority=True),
        Binding("ctrl+s", "app.settings", "Settings", priority=True),
        Binding("f5", "step_mode", "Step mode", priority=True),
        Binding("f6", "race", "Race", priority=True),
        Binding("f7", "costs", "Why (costs)", priority=True),
    ]

    def __init__(self, settings: Settings, host: ModelHost, history: HistoryStore,
                 launch: Launch | None = None) -> None:
        super().__init__(settings, host, history, launch)
        self.cancel = threading.Event()
        self.gate = StepGate()
        self.show_rejected = True
        # the command palette's drafters for this screen (Textual reads the calling screen's)
        self.COMMANDS = {draft_commands(self.target_path, self.swap_draft)}  # type: ignore[misc]

    # -- layout -----------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            with Vertical(id="chat"):
                yield Transcript(id="transcript")
                yield StepPanel(id="step")
                yield Legend()
                yield Static("loading models…", id="status")
                yield PromptInput(id="prompt")
            yield StatsPanel(id="side")
        yield Footer()

    @property
    def transcript(self) -> Transcript:
        return self.query_one(Transcript)

    def on_mount(self) -> None:
        """Start what the app was asked for: load the models, or replay or race traces."""
        # typing may start while the models load (kept, sent once they are); a replay or a race
        # loads none, so there is nothing to send to
        prompt = self.query_one(PromptInput)
        prompt.disabled = bool(self.launch.race) or self.launch.replay is not None
        if not prompt.disabled:
            prompt.focus()
        self.transcript.show_rejected = self.show_rejected
        self.set_interval(REDRAW_S, self.redraw)
        launch = self.launch
        if launch.step:
            self.action_step_mode()
        if launch.race:
            self.set_status("race replay: no model loaded (Esc closes the race)")
            self.app.push_screen(RaceScreen([Lane(lane_label(t.meta), t.events) for t in launch.race],
                                            launch.replay_speed))
        elif launch.replay is not None:
            self.start_replay(launch.replay, launch.replay_speed)
        else:
            models = self.settings.models
            self.set_status(f"asking the llama-server at {models.server}…" if models.server else
                            f"loading {models.target} with draft {models.draft}…")
            self.load_models(launch.warm_up)

    def on_worker_failed(self, message: WorkerFailed) -> None:
        if message.message is not None:
            self.transcript.fail(message.error)
            prompt = self.query_one(PromptInput)
            if not prompt.text.strip():
                prompt.text = message.message
        self.set_status(f"[b red]error:[/] {message.error}")
        self.notify(message.error, severity="error", timeout=15)
        if self.chat is not None:
            self.ready_for_input()

    # -- a turn -----------------------------------------------------------------------------
    @on(PromptInput.Submitted)
    def send(self, message: PromptInput.Submitted) -> None:
        if self.busy or self.chat is None:  # the message goes back in the box, not lost
            self.query_one(PromptInput).text = message.text
            self.notify(f"not ready yet ({self.status_text}): Enter sends it once it is"
                        if self.chat is None else "a reply is still being generated (Esc stops it)")
            return
        self.begin_reply(message.text)
        self.run_turn(self.chat, message.text)

    def begin_reply(self, text: str) -> None:
        """Show (and, in a conversation, save) the user's message and open an empty reply."""
        self.transcript.open_reply(text)
        if self.chat is not None:  # a replay is not a conversation
            self.chat.begin(text)
        self.cancel = threading.Event()
        self.gate.reset()
        if self.gate.on:
            self.query_one(StepPanel).focus()
        self.query_one(PromptInput).cursor_blink = False  # a blink redraw costs generation time
        self.set_status("generating… (Esc stops)")

    @work(thread=True, exclusive=True, group="turn")
    def run_turn(self, chat: ChatState, text: str) -> None:
        generation = self.settings.sampling.generation()
        cancel, gate = self.cancel, self.gate
        try:
            for batch in round_batches(chat.turn(text, generation, cancel)):
                self.post_message(EventBatch(batch))
                if isinstance(batch[-1], RoundEvent):
                    gate.hold(cancel)  # the engine's clock excludes this pause
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc), text))

    def start_replay(self, trace: Trace, speed: float) -> None:
        """Play a recorded turn at its recorded pace (times `speed`); no model is loaded."""
        meta = trace.meta
        self.set_status(f"replay ({speed:g}x) of a turn recorded with {meta.get('target', '?')} "
                        f"and draft {meta.get('draft', '?')}: no model loaded")
        self.begin_reply(trace.prompt)
        self.play_trace(trace, speed)

    @work(thread=True, exclusive=True, group="turn")
    def play_trace(self, trace: Trace, speed: float) -> None:
        """Hand the recorded rounds over when their time comes, like a live turn: step mode
        holds each round for Space (the pause shifts the clock), Esc plays the rest at once."""
        cancel, gate = self.cancel, self.gate
        start = time.monotonic()
        for batch in round_batches(trace.events):
            last = batch[-1]
            if isinstance(last, RoundEvent):
                cancel.wait(max(0.0, start + last.t_s / speed - time.monotonic()))
            self.post_message(EventBatch(batch))
            if isinstance(last, RoundEvent):
                start += gate.hold(cancel)

    def on_event_batch(self, message: EventBatch) -> None:
        """Draw a round's events (the transcript), save them (the conversation) and say what
        happened (status line, step panel, stats panel at the turn's end)."""
        self.transcript.take(message.events)
        for event in message.events:
            if self.chat is not None:
                self.chat.record(event)
            if isinstance(event, ContextEvent):
                self.set_status(f"{context_note(event)} (context policy: "
                                f"{self.settings.sampling.context_policy})")
            elif isinstance(event, RoundEvent) and self.gate.on:
                self.query_one(StepPanel).update(
                    describe_round(message.events, self.query_one(StatsPanel).baseline))
                self.redraw()
            elif isinstance(event, TurnEvent):
                self.finish_turn(event)

    def redraw(self) -> None:
        if self.transcript.redraw() and self.busy:
            self.query_one(StatsPanel).show(self.transcript.stats, self.draft_name)

    def finish_turn(self, turn: TurnEvent) -> None:
        side = self.query_one(StatsPanel)
        if turn.baseline_tokens_per_second:
            side.set_baseline(turn.baseline_tokens_per_second, turn.baseline_source)
        side.show(self.transcript.stats, turn.draft, final=turn)
        self.query_one(PromptInput).cursor_blink = True
        status = f"{turn.n_tokens} tokens · stop: {turn.stop_reason}" + slower_why(turn)
        if self.history.problem:
            status = f"[b]{self.history.problem}[/]"
        self.set_status(status)

    # -- actions ----------------------------------------------------------------------------
    def action_stop(self) -> None:
        if self.busy:
            self.cancel.set()
            self.gate.step()
            self.set_status("stopping after this round…")

    def action_step_mode(self) -> None:
        """Toggle step-through: each round waits for Space and is laid out in the step panel."""
        stepping = not self.gate.on
        self.gate.switch(stepping)
        panel = self.query_one(StepPanel)
        panel.display = stepping
        if stepping:
            panel.update(Content.from_markup(f"[b]step-through[/b]  {EXPLAIN}\n\nSend a message;"
                                             " each round will wait for Space."))
            if self.busy:
                panel.focus()
        else:
            self.query_one(PromptInput).focus()
        self.set_status("step-through on (F5 turns it off)" if stepping else "step-through off")

    def action_next_round(self) -> None:
        self.gate.step()

    def action_run_on(self) -> None:
        if self.gate.on:
            self.action_step_mode()

    def action_toggle_rejected(self) -> None:
        self.show_rejected = not self.show_rejected
        self.transcript.set_show_rejected(self.show_rejected)

    def turn_slides(self) -> list[TurnSlide]:
        """This conversation's finished turns as slides, named after it (its history id, or a
        replay, and its first words)."""
        if self.chat is None:
            return self.transcript.slides("replay")
        saved = self.chat.conversation_id
        return self.transcript.slides("chat" if saved is None else f"chat-{saved}")

    def action_race(self) -> None:
        """Race the prompt in the input box (or the last one sent): target-only against the
        current drafter, each generated alone, then played back side by side."""
        if self.busy or self.chat is None:
            self.notify("a race needs the models loaded and no reply running")
            return
        engine = self.local_engine("a race")
        if engine is None:
            return
        users = [text for role, text in self.chat.session.conversation.messages if role == "user"]
        text = self.query_one(PromptInput).text.strip() or (users[-1] if users else "")
        if not text:
            self.notify("type a prompt first: F6 races it")
            return
        self.cancel = threading.Event()
        self.run_race(engine, text)

    @work(thread=True, exclusive=True, group="turn")
    def run_race(self, engine: SpeculativeEngine, text: str) -> None:
        def status(i: int, label: str) -> None:
            self.post_message(StatusLine(f"race: {label}, alone ({i + 1}/2)… (Esc stops)"))

        try:
            lanes = self.host.race(engine, text, self.cancel, status)
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))
            return
        self.post_message(RaceReady(lanes))

    def on_race_ready(self, message: RaceReady) -> None:
        stopped = any(e.stop_reason == "cancelled" for lane in message.lanes
                      for e in lane.events if isinstance(e, TurnEvent))
        self.set_status("race stopped" if stopped else "race ready: both lanes recorded")
        if not stopped:
            self.app.push_screen(RaceScreen(message.lanes, self.launch.replay_speed))

    def action_costs(self) -> None:
        """Why speculation is faster or slower here: this machine's costs and this
        conversation's acceptance, plotted (WhyScreen)."""
        if self.busy or self.chat is None:
            self.notify("the costs screen times the models: load them and let the reply finish")
            return
        engine = self.local_engine("the costs screen (it times the models)")
        if engine is None:
            return
        self.app.push_screen(WhyScreen(self.chat.acceptance(K_MAX), self.chat.measured_turns(),
                                       engine.draft_settings.k, engine.drafter.name, engine))

    def action_new_chat(self) -> None:
        if self.busy or self.chat is None:
            return
        self.chat.new()
        self.transcript.clear()
        self.set_status("new conversation")

    def action_history(self) -> None:
        if not self.busy and self.chat is not None:
            self.app.push_screen(HistoryScreen(self.history), self.open_conversation)

    def open_conversation(self, conversation_id: int | None) -> None:
        """Show a saved conversation and continue it: the engine re-evaluates its tokens once."""
        if conversation_id is None or self.chat is None:
            return
        stored, messages = self.chat.open(conversation_id)
        self.transcript.show_messages(messages)
        self.set_status(f"opened: {stored.title}")
