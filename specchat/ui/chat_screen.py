"""The chat screen: transcript, stats panel, step panel and prompt, and the turn that feeds them.

Model work runs in thread workers that call the `ModelHost` and post dataclass messages with
what they made (an engine, a drafter, a batch of a round's events); this screen's state changes
only in its message handlers, on the UI thread. Whether it is busy is read off its running
workers. Esc sets the turn's cancel flag; the engine ends the turn after the round in flight
with both caches consistent, and the partial reply is kept and marked as stopped.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Static
from textual.worker import get_current_worker

from specchat.chat.history import ReplyRecorder
from specchat.chat.session import ChatSession, Conversation
from specchat.costs import conditional
from specchat.engine.drafters import Drafter
from specchat.engine.events import ContextEvent, Event, RoundEvent, TokenEvent, TurnEvent
from specchat.engine.loop import SpeculativeEngine
from specchat.engine.stats import TurnStats
from specchat.errors import ModelNotInstalledError, SpecchatError
from specchat.host import StepGate, round_batches
from specchat.render import context_note, placement
from specchat.trace import Lane, Trace, lane_label
from specchat.ui.cost_screen import CostScreen
from specchat.ui.fetch_screen import FetchScreen
from specchat.ui.history_screen import HistoryScreen
from specchat.ui.model_menu import ModelMenu, draft_choices, target_choices
from specchat.ui.race_screen import RaceScreen
from specchat.ui.step_panel import EXPLAIN, StepPanel, describe_round
from specchat.ui.widgets import Legend, LiveReply, PromptInput, StatsPanel

if TYPE_CHECKING:
    from specchat.ui.app import SpecchatApp

REDRAW_S = 0.25
MODEL_GROUPS = ("models", "turn")
"""Worker groups whose running workers make the screen busy."""


@dataclass
class EventBatch(Message):
    """The events of one round (or the final turn summary), posted by the turn worker."""

    events: list[Event]


@dataclass
class WorkerFailed(Message):
    error: str
    message: str | None = None
    """The message of a turn that failed: the open reply says so, and the message goes back
    into an empty input box, so Enter sends it again."""


@dataclass
class ModelsReady(Message):
    engine: SpeculativeEngine


@dataclass
class DrafterReady(Message):
    drafter: Drafter
    spec: str
    """What it was loaded from, as --draft takes it (the config file keeps this)."""


@dataclass
class TargetReady(Message):
    engine: SpeculativeEngine
    note: str


@dataclass
class RaceReady(Message):
    lanes: list[Lane]


@dataclass
class StatusLine(Message):
    text: str


def slower_why(turn: TurnEvent) -> str:
    """One line of why a reply was slower than the target alone, from what the turn measured:
    a round's cost in target steps against the tokens a round yielded."""
    if not turn.speedup or turn.speedup >= 1 or not turn.baseline_tokens_per_second \
            or turn.rounds < 2 or not turn.mean_accepted_length:
        return ""
    # speedup = tokens per round (after the first) over a round's cost in target steps
    round_steps = turn.decode_s / (turn.rounds - 1) * turn.baseline_tokens_per_second
    per_round = (turn.n_tokens - 1) / (turn.rounds - 1)
    # fits one status line beside "N tokens · stop: …" (the chat pane is 112 columns of 160)
    return (f" · {turn.speedup:.2f}x: {round_steps:.1f} steps a round for {per_round:.1f} "
            "tokens (why: F7, specchat tune)")


class ChatScreen(Screen):
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
    app: SpecchatApp

    def __init__(self) -> None:
        super().__init__()
        self.session: ChatSession | None = None
        self.conversation_id: int | None = None
        self.cancel = threading.Event()
        self.gate = StepGate()
        self.live: LiveReply | None = None
        self.stats = TurnStats()
        self.last_turn: TurnEvent | None = None
        self.turns: list[TurnEvent] = []
        """This conversation's finished turns (for the costs screen)."""
        self.dirty = False
        self.status_text = ""
        self.recorder: ReplyRecorder | None = None
        """Saves the reply in flight as it grows (None for a replay)."""

    # -- layout -----------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            with Vertical(id="chat"):
                yield VerticalScroll(id="transcript")
                yield StepPanel(id="step")
                yield Legend()
                yield Static("loading models…", id="status")
                yield PromptInput(id="prompt")
            yield StatsPanel(id="side")
        yield Footer()

    def on_mount(self) -> None:
        """Start what the app was asked for: load the models, or replay or race traces."""
        self.query_one(PromptInput).disabled = True
        self.set_interval(REDRAW_S, self.redraw)
        s = self.app.settings
        if s.step:
            self.action_step_mode()
        if s.race:
            self.set_status("race replay: no model loaded (Esc closes the race)")
            self.app.push_screen(RaceScreen([Lane(lane_label(t.meta), t.events) for t in s.race],
                                            s.replay_speed))
        elif s.replay is not None:
            self.start_replay(s.replay, s.replay_speed)
        else:
            self.load_models(s.warm_up)

    @property
    def target_path(self) -> Path | None:
        return self.session.engine.target.path if self.session is not None else None

    @property
    def busy(self) -> bool:
        return any(w.node is self and w.group in MODEL_GROUPS and not w.is_finished
                   for w in self.app.workers)

    @property
    def draft_name(self) -> str:
        if self.session is not None:
            return self.session.engine.drafter.name
        replay = self.app.settings.replay
        return str(replay.meta.get("draft", "?")) if replay else "?"

    def set_status(self, text: str) -> None:
        self.status_text = text
        self.query_one("#status", Static).update(text, layout=False)  # one fixed line

    def on_status_line(self, message: StatusLine) -> None:
        self.set_status(message.text)

    # -- loading ----------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="models")
    def load_models(self, warm_up: bool) -> None:
        worker = get_current_worker()
        try:
            engine = self.app.host.load()
            if warm_up:
                self.app.host.warm_up(engine)
        except ModelNotInstalledError as exc:
            self.app.call_from_thread(self.app.push_screen, FetchScreen(str(exc)), self._fetched)
            return
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))
            return
        if worker.is_cancelled:
            engine.close()
            return
        self.post_message(ModelsReady(engine))

    def _fetched(self, ok: bool | None) -> None:
        if ok:
            self.set_status("models fetched and verified; loading…")
            self.load_models(self.app.settings.warm_up)

    def on_models_ready(self, message: ModelsReady) -> None:
        sampling = self.app.settings.settings.sampling
        self.session = ChatSession(message.engine, Conversation(system=sampling.system),
                                   sampling.context_policy)
        self.query_one(StatsPanel).show(self.stats, self.draft_name)
        self.ready_for_input()
        assert self.target_path is not None
        self.set_status(f"{placement(message.engine)} · Enter sends, Ctrl+J newline, Esc stops")
        history = self.app.history
        if history.problem:
            self.set_status(f"[b]{history.problem}[/]")
        elif interrupted := history.interrupted():
            self.notify(f"A reply in “{interrupted[0].title}” was cut off when specchat stopped: "
                        "Ctrl+O opens it (marked interrupted).", timeout=10)

    def on_worker_failed(self, message: WorkerFailed) -> None:
        if message.message is not None and self.live is not None:
            self.live.note = ("cut off: " if self.live.pieces else "no reply: ") + message.error
            self.live.refresh_content()
            prompt = self.query_one(PromptInput)
            if not prompt.text.strip():
                prompt.text = message.message
        self.set_status(f"[b red]error:[/] {message.error}")
        self.notify(message.error, severity="error", timeout=15)
        if self.session is not None:
            self.ready_for_input()

    # -- a turn -----------------------------------------------------------------------------
    @on(PromptInput.Submitted)
    def send(self, message: PromptInput.Submitted) -> None:
        if self.busy or self.session is None:
            self.notify("a reply is still being generated (Esc stops it)")
            return
        self.begin_reply(message.text)
        self.run_turn(self.session, message.text)

    def begin_reply(self, text: str) -> None:
        """Show and save the user's message and open an empty reply for the turn's events."""
        transcript = self.query_one("#transcript", VerticalScroll)
        user = LiveReply(role="user")
        user.set_plain(text)
        self.live = LiveReply(role="assistant")
        self.live.show_rejected = self.app.show_rejected
        transcript.mount(user, self.live)
        transcript.scroll_end(animate=False)
        self.recorder = None
        if self.session is not None:  # a replay is not a conversation
            history = self.app.history
            if self.conversation_id is None:
                self.conversation_id = history.new_conversation(
                    text[:60], str(self.target_path), self.draft_name, self.session.conversation.system)
            history.add_message(self.conversation_id, "user", text)
            self.recorder = ReplyRecorder(history, self.conversation_id)
        self.stats = TurnStats()
        self.cancel = threading.Event()
        self.gate.reset()
        if self.gate.on:
            self.query_one(StepPanel).focus()
        self.query_one(PromptInput).cursor_blink = False  # a blink redraw costs generation time
        self.set_status("generating… (Esc stops)")

    @work(thread=True, exclusive=True, group="turn")
    def run_turn(self, session: ChatSession, text: str) -> None:
        generation = self.app.settings.settings.sampling.generation()
        cancel, gate = self.cancel, self.gate
        try:
            for batch in round_batches(session.turn(text, generation, cancel)):
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
        """Take a round's events; drawing happens at most REDRAW_S apart (see `redraw`), so a
        fast GPU's fifty rounds a second cost the UI no more than a CPU's three."""
        assert self.live is not None
        tokens = [e for e in message.events if isinstance(e, TokenEvent)]
        if tokens:
            self.live.add_tokens(tokens)
        self.dirty = True
        for event in message.events:
            if self.recorder is not None:
                self.recorder(event)
            if isinstance(event, ContextEvent):
                self.stats.add_context(event)  # live numbers leave it out like the turn's
                self.show_context(event)
            elif isinstance(event, RoundEvent):
                self.stats.add_round(event)
                if self.gate.on:
                    self.query_one(StepPanel).update(
                        describe_round(message.events, self.query_one(StatsPanel).baseline))
                    self.redraw()
            elif isinstance(event, TurnEvent):
                self.redraw(busy=True)
                self._finish_turn(event)

    def show_context(self, event: ContextEvent) -> None:
        """Say in the transcript that turns were left out of the model's view: above the reply
        when it happened before it, under the reply when the reply ran into the limit."""
        assert self.live is not None
        note = context_note(event)
        if event.during_reply:
            self.live.note = "; ".join(filter(None, (self.live.note, note)))
        else:
            self.query_one("#transcript", VerticalScroll).mount(
                Static(f"⋯ {note}", classes="context"), before=self.live)
        self.set_status(f"{note} (context policy: {self.app.settings.settings.sampling.context_policy})")

    def redraw(self, busy: bool | None = None) -> None:
        if not self.dirty or self.live is None:
            return
        self.dirty = False
        self.live.refresh_content()
        if self.busy if busy is None else busy:
            self.query_one(StatsPanel).show(self.stats, self.draft_name)
        transcript = self.query_one("#transcript", VerticalScroll)
        if transcript.max_scroll_y - transcript.scroll_y <= 3:  # follow only when at the bottom
            transcript.scroll_end(animate=False)

    def _finish_turn(self, turn: TurnEvent) -> None:
        assert self.live is not None
        self.last_turn = turn
        self.turns.append(turn)
        side = self.query_one(StatsPanel)
        if turn.baseline_tokens_per_second:
            side.set_baseline(turn.baseline_tokens_per_second, turn.baseline_source)
        side.show(self.stats, turn.draft, final=turn)
        ends = {"cancelled": "stopped",
                "context_full": "the context is full: Ctrl+N starts a new chat, or raise --ctx"}
        if turn.stop_reason in ends:
            self.live.note = "; ".join(filter(None, (self.live.note, ends[turn.stop_reason])))
            self.live.refresh_content()
        self.query_one(PromptInput).cursor_blink = True
        status = f"{turn.n_tokens} tokens · stop: {turn.stop_reason}" + slower_why(turn)
        if self.app.history.problem:
            status = f"[b]{self.app.history.problem}[/]"
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
        self.gate.turn(stepping)
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
        self.app.show_rejected = not self.app.show_rejected
        for reply in self.query(LiveReply):
            reply.show_rejected = self.app.show_rejected

    def action_race(self) -> None:
        """Race the prompt in the input box (or the last one sent): target-only against the
        current drafter, each generated alone, then played back side by side."""
        if self.busy or self.session is None:
            self.notify("a race needs the models loaded and no reply running")
            return
        users = [text for role, text in self.session.conversation.messages if role == "user"]
        text = self.query_one(PromptInput).text.strip() or (users[-1] if users else "")
        if not text:
            self.notify("type a prompt first: F6 races it")
            return
        self.cancel = threading.Event()
        self.run_race(self.session.engine, text)

    @work(thread=True, exclusive=True, group="turn")
    def run_race(self, engine: SpeculativeEngine, text: str) -> None:
        def status(i: int, label: str) -> None:
            self.post_message(StatusLine(f"race: {label}, alone ({i + 1}/2)… (Esc stops)"))

        try:
            lanes = self.app.host.race(engine, text, self.cancel, status)
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))
            return
        self.post_message(RaceReady(lanes))

    def on_race_ready(self, message: RaceReady) -> None:
        stopped = any(e.stop_reason == "cancelled" for lane in message.lanes
                      for e in lane.events if isinstance(e, TurnEvent))
        self.set_status("race stopped" if stopped else "race ready: both lanes recorded")
        if not stopped:
            self.app.push_screen(RaceScreen(message.lanes, self.app.settings.replay_speed))

    def action_costs(self) -> None:
        """Why speculation is faster or slower here: this machine's costs and this
        conversation's acceptance, plotted (CostScreen)."""
        if self.busy or self.session is None:
            self.notify("the costs screen times the models: load them and let the reply finish")
            return
        engine = self.session.engine
        spec = [t for t in self.turns if t.accepted_by_position]
        per_turn = [conditional(t.accepted_by_position) for t in spec]
        accept = [statistics.fmean(rates[i] for rates in per_turn if i < len(rates))
                  for i in range(max((len(r) for r in per_turn), default=0))]
        points = [(t.k, t.speedup) for t in self.turns if t.speedup is not None and t.draft != "none"]
        self.app.push_screen(CostScreen(accept, points, engine.draft_settings.k, engine.drafter.name))

    def action_draft_menu(self) -> None:
        if self.session is not None and not self.busy:
            self.open_menu("draft", self.status_text)
            self.set_status("reading model headers…")

    def action_target_menu(self) -> None:
        if self.session is not None and not self.busy:
            self.open_menu("target", self.status_text)
            self.set_status("reading model headers…")

    @work(thread=True, exclusive=True, group="menu")
    def open_menu(self, role: str, status: str) -> None:
        """Judge every GGUF on disk from its header off the UI thread (a Qwen header takes most
        of a second to read the first time), then show the menu."""
        session = self.session
        assert session is not None
        engine = session.engine
        if role == "draft":
            choices = draft_choices(engine.target.path)
            empty = "" if any(c.ok for c in choices[2:]) else \
                "No compatible draft model on disk for this target."
            menu = ModelMenu("Draft model", choices, engine.drafter.name, empty)
            done = self.swap_draft
        else:
            model = engine.drafter.model
            menu = ModelMenu("Target model", target_choices(model.path if model else None),
                             engine.target.path.stem)
            done = self.swap_target
        self.post_message(StatusLine(status))
        self.app.call_from_thread(self.app.push_screen, menu, lambda spec: spec and done(spec))

    def swap_draft(self, spec: str) -> None:
        if self.busy or self.session is None:
            self.notify("stop the reply first (Esc), then swap the draft")
            return
        self.set_status(f"loading draft {spec}…")
        self.load_draft(self.session.engine, spec)

    @work(thread=True, exclusive=True, group="models")
    def load_draft(self, engine: SpeculativeEngine, spec: str) -> None:
        try:
            drafter = self.app.host.load_drafter(engine, spec)
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))
            return
        if get_current_worker().is_cancelled:
            drafter.close()
            return
        self.post_message(DrafterReady(drafter, spec))

    def on_drafter_ready(self, message: DrafterReady) -> None:
        assert self.session is not None
        self.session.engine.use_drafter(message.drafter)
        self.app.settings.settings.models.draft = message.spec
        if self.conversation_id is not None:
            self.app.history.set_models(self.conversation_id, str(self.target_path),
                                        message.drafter.name)
        self.set_status(f"draft: {message.drafter.name} (it catches up on the conversation "
                        "next turn)")

    def swap_target(self, spec: str) -> None:
        if self.busy or self.session is None:
            self.notify("stop the reply first (Esc), then change the target")
            return
        self.set_status(f"loading target {spec}…")
        self.query_one(PromptInput).disabled = True
        self.load_target(self.session.engine, spec)

    @work(thread=True, exclusive=True, group="models")
    def load_target(self, engine: SpeculativeEngine, spec: str) -> None:
        """A new target keeps the conversation (it is re-evaluated on the next turn); a draft
        model that cannot draft for it falls back to none, and the user is told why."""
        try:
            fresh, note = self.app.host.load_target(engine, spec)
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))
            return
        self.post_message(TargetReady(fresh, note))

    def on_target_ready(self, message: TargetReady) -> None:
        assert self.session is not None
        self.session.engine = message.engine
        self.set_status(f"target: {message.engine.target.name}{message.note}")
        self.ready_for_input()

    def ready_for_input(self) -> None:
        """Enable the input box and give it the keys: it was disabled while models loaded, so
        a closing menu could not hand it the focus back, and typing went nowhere."""
        prompt = self.query_one(PromptInput)
        prompt.disabled = False
        prompt.focus()

    def action_new_chat(self) -> None:
        if self.busy or self.session is None:
            return
        self.session.conversation = Conversation(system=self.session.conversation.system)
        self.session.engine.policy.costs.new_conversation()
        self.conversation_id = None
        self.turns = []
        self.query_one("#transcript", VerticalScroll).remove_children()
        self.set_status("new conversation")

    def action_history(self) -> None:
        if not self.busy and self.session is not None:
            self.app.push_screen(HistoryScreen(self.app.history), self.open_conversation)

    def open_conversation(self, conversation_id: int | None) -> None:
        """Show a saved conversation and continue it: the engine re-evaluates its tokens once."""
        if conversation_id is None or self.session is None:
            return
        history = self.app.history
        stored = history.conversation(conversation_id)
        messages = history.messages(conversation_id)
        self.session.conversation = Conversation(
            system=stored.system, messages=[(m.role, m.content) for m in messages])
        self.conversation_id = conversation_id
        self.turns = []
        transcript = self.query_one("#transcript", VerticalScroll)
        transcript.remove_children()
        for m in messages:
            widget = LiveReply(role=m.role)
            if not m.complete:
                widget.note = "interrupted: specchat stopped before this reply ended"
            widget.set_plain(m.content)
            transcript.mount(widget)
        transcript.scroll_end(animate=False)
        self.set_status(f"opened: {stored.title}")

    def settings_changed(self) -> None:
        """The app's settings changed: the engine uses them from the next turn on."""
        if self.session is not None:
            self.app.host.configure(self.session.engine)
            self.session.context_policy = self.app.settings.settings.sampling.context_policy
