"""The Textual app: chat with a local model pair and watch every draft token's verdict.

Model work runs in one thread worker (Textual `@work(thread=True)`); it hands the UI one batch
of events per round as a message, so the UI never waits on a model and redraws at most once a
round. Esc sets the turn's cancel flag; the engine ends the turn after the round in flight with
both caches consistent, and the partial reply is kept and marked as stopped.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import Footer, Header, Static

from specchat.backends.llamacpp import NO_TRUNCATION
from specchat.catalog import compat
from specchat.chat.history import HistoryStore
from specchat.chat.session import ChatSession, Conversation
from specchat.config import Config
from specchat.engine.drafters import ModelDrafter, NoDrafter
from specchat.engine.events import Event, RoundEvent, TokenEvent, TurnEvent
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.sampling import SamplingParams
from specchat.engine.stats import TurnStats
from specchat.errors import ContextOverflowError, ModelNotInstalledError, SpecchatError
from specchat.loading import ModelOptions, build_engine, load_drafter, load_target
from specchat.trace import Trace, lane_label
from specchat.ui.fetch_screen import FetchScreen
from specchat.ui.history_screen import HistoryScreen
from specchat.ui.model_menu import (
    DraftCommands,
    ModelMenu,
    draft_choices,
    target_choices,
)
from specchat.ui.race_screen import Lane, RaceScreen
from specchat.ui.settings_screen import SettingsScreen
from specchat.ui.step_panel import EXPLAIN, StepPanel, describe_round
from specchat.ui.theming import DEFAULT_THEME, DEFAULT_TOKEN_COLOURS, load_themes
from specchat.ui.widgets import Legend, LiveReply, PromptInput, StatsPanel

BASELINE_TOKENS = 16
WARMUP_TOKENS = 8
REDRAW_S = 0.25


@dataclass
class AppSettings:
    target: str = "default"
    draft: str = "default"
    sampling: SamplingParams = field(default_factory=SamplingParams)
    draft_settings: DraftSettings = field(default_factory=DraftSettings)
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    models: ModelOptions = field(default_factory=ModelOptions)
    system: str | None = None
    measure_baseline: bool = True
    """Measure the target-only rate at start (BASELINE_TOKENS tokens) for the speedup figure."""
    replay: Trace | None = None
    """Play this recorded turn instead of loading models."""
    replay_speed: float = 1.0
    race: list[Trace] = field(default_factory=list)
    """Play these recorded turns side by side on one clock instead of loading models."""
    step: bool = False
    """Start in step-through mode (F5)."""


class EventBatch(Message):
    """The events of one round (or the final turn summary), posted by the turn worker."""

    def __init__(self, events: list[Event]) -> None:
        super().__init__()
        self.events = events


class WorkerFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class RaceReady(Message):
    def __init__(self, lanes: list[Lane]) -> None:
        super().__init__()
        self.lanes = lanes


class ModelsReady(Message):
    def __init__(self, baseline: float | None) -> None:
        super().__init__()
        self.baseline = baseline


class SpecchatApp(App):
    TITLE = "specchat"
    CSS = """
    #main { height: 1fr; }
    #chat { width: 1fr; }
    #transcript { height: 1fr; padding: 0 1; }
    #transcript > .user { color: $text-muted; margin: 1 0 0 0; }
    #transcript > .assistant { margin: 0 0 0 2; }
    #side { width: 46; height: 100%; border-left: solid $panel; padding: 0 1; }
    #status { color: $text-muted; height: 1; }
    Legend { height: auto; margin: 0 1; }
    PromptInput { height: 5; }
    """
    BINDINGS = [
        Binding("escape", "stop", "Stop reply"),
        # priority: the prompt (a TextArea) would take ctrl+d as "delete right" otherwise
        Binding("ctrl+d", "draft_menu", "Draft", priority=True),
        Binding("ctrl+t", "target_menu", "Target", priority=True),
        Binding("ctrl+r", "toggle_rejected", "Rejected on/off", priority=True),
        Binding("ctrl+n", "new_chat", "New chat", priority=True),
        Binding("ctrl+o", "history", "History", priority=True),
        Binding("ctrl+s", "settings", "Settings", priority=True),
        Binding("f5", "step_mode", "Step mode", priority=True),
        Binding("f6", "race", "Race", priority=True),
    ]
    COMMANDS = App.COMMANDS | {DraftCommands}

    def __init__(self, settings: AppSettings, history: HistoryStore | None = None,
                 config: Config | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.config = config or Config.load()
        self.history = history or HistoryStore()
        self.session: ChatSession | None = None
        self.target_path: Path | None = None
        self.conversation_id: int | None = None
        self.cancel = threading.Event()
        self.busy = False
        self.show_rejected = True
        self.live: LiveReply | None = None
        self.stats = TurnStats()
        self.last_turn: TurnEvent | None = None
        self.dirty = False
        self.status_text = ""
        self.stepping = False
        self.step_gate = threading.Event()
        """Set by the user (Space) to let the next round run while stepping."""

    # -- layout -----------------------------------------------------------------------------
    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(DEFAULT_TOKEN_COLOURS)

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
        for theme in load_themes():
            self.register_theme(theme)
        saved = self.config.section("ui").get("theme", DEFAULT_THEME)
        self.theme = saved if saved in self.available_themes else DEFAULT_THEME
        self.theme_changed_signal.subscribe(self, self._remember_theme)
        self.show_rejected = bool(self.config.section("ui").get("show_rejected", True))
        if self.config.error:
            self.notify(self.config.error, severity="warning", timeout=10)
        self.query_one(PromptInput).disabled = True
        self.set_interval(REDRAW_S, self.redraw)
        if self.settings.step:
            self.action_step_mode()
        if self.settings.race:
            self.set_status("race replay: no model loaded (Esc closes the race)")
            self.start_race([Lane(lane_label(t.meta), t.events) for t in self.settings.race])
        elif self.settings.replay is not None:
            self.start_replay(self.settings.replay, self.settings.replay_speed)
        else:
            self.load_models()

    @property
    def draft_name(self) -> str:
        if self.session is not None:
            return self.session.engine.drafter.name
        return str(self.settings.replay.meta.get("draft", "?")) if self.settings.replay else "?"

    def start_replay(self, trace: Trace, speed: float) -> None:
        """Play a recorded turn at its recorded pace (times `speed`); no model is loaded."""
        meta = trace.meta
        self.set_status(f"replay ({speed:g}x) of a turn recorded with {meta.get('target', '?')} "
                        f"and draft {meta.get('draft', '?')}: no model loaded")
        self.begin_reply(trace.prompt)
        self.play_trace(trace, speed)

    @work(thread=True, exclusive=True, group="turn")
    def play_trace(self, trace: Trace, speed: float) -> None:
        """Hand the recorded rounds to the UI when their time comes, like a live turn: step
        mode holds each round for Space (the pause shifts the clock), Esc plays the rest at once."""
        start, batch = time.monotonic(), []
        for event in trace.events:
            batch.append(event)
            if not isinstance(event, (RoundEvent, TurnEvent)):
                continue
            if isinstance(event, RoundEvent):
                self.cancel.wait(max(0.0, start + event.t_s / speed - time.monotonic()))
            self.post_message(EventBatch(batch))
            batch = []
            if isinstance(event, RoundEvent):
                start += self._hold_for_step()

    def _hold_for_step(self) -> float:
        """In step mode (and not stopping), wait in the worker for Space; return the seconds
        waited."""
        if not self.stepping or self.cancel.is_set():
            return 0.0
        paused = time.monotonic()
        self.step_gate.wait()
        self.step_gate.clear()
        return time.monotonic() - paused

    def start_race(self, lanes: list[Lane]) -> None:
        self.push_screen(RaceScreen(lanes, self.settings.replay_speed))

    def _remember_theme(self, theme) -> None:
        ui = self.config.data.setdefault("ui", {})
        if self.config.error or ui.get("theme", DEFAULT_THEME) == theme.name:
            return  # never overwrite a broken config file; nothing new to write
        ui["theme"] = theme.name
        self.config.save()

    def set_status(self, text: str) -> None:
        self.status_text = text
        self.query_one("#status", Static).update(text, layout=False)  # one fixed line

    # -- model work (thread workers) ----------------------------------------------------------
    @work(thread=True, exclusive=True, group="models")
    def load_models(self) -> None:
        s = self.settings
        try:
            engine = build_engine(s.target, s.draft, s.sampling, s.draft_settings, s.models)
        except ModelNotInstalledError as exc:
            self.call_from_thread(self.push_screen, FetchScreen(str(exc)), self._fetched)
            return
        except SpecchatError as exc:
            self.post_message(WorkerFailed(f"{exc}"))
            return
        target = engine.target
        self.target_path = target.path
        self.session = ChatSession(engine, Conversation(system=s.system))
        baseline = None
        if s.measure_baseline:
            ids = target.tokenize(target.render_chat([("user", "Say hello.")]))
            # warm up first: right after loading, both models' weights are still being paged
            # in, and a rate measured then would be several times too low
            list(engine.generate(ids, GenerationSettings(max_tokens=WARMUP_TOKENS)))
            plain = SpeculativeEngine(target, NoDrafter(), SamplingParams())
            turn = list(plain.generate(ids, GenerationSettings(max_tokens=BASELINE_TOKENS)))[-1]
            baseline = turn.tokens_per_second
        self.post_message(ModelsReady(baseline))

    @work(thread=True, exclusive=True, group="turn")
    def run_turn(self, text: str) -> None:
        assert self.session is not None
        batch: list[Event] = []
        try:
            for event in self.session.turn(text, self.settings.generation, self.cancel):
                batch.append(event)
                if isinstance(event, (RoundEvent, TurnEvent)):
                    self.post_message(EventBatch(batch))
                    batch = []
                if isinstance(event, RoundEvent):
                    self._hold_for_step()  # the engine's clock excludes this pause
        except ContextOverflowError as exc:
            self.post_message(WorkerFailed(f"{exc}; start a new chat (Ctrl+N) or raise --ctx"))
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))

    @work(thread=True, exclusive=True, group="models")
    def load_draft(self, spec: str) -> None:
        assert self.session is not None
        engine = self.session.engine
        s = self.settings
        try:
            drafter = load_drafter(spec, engine.target, s.sampling, engine.rng, s.models)
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))
            return
        self.call_from_thread(self._use_drafter, drafter)

    def _fetched(self, ok: bool | None) -> None:
        if ok:
            self.set_status("models fetched and verified; loading…")
            self.load_models()

    def _use_drafter(self, drafter) -> None:
        assert self.session is not None
        old = self.session.engine.drafter
        self.session.engine.drafter = drafter
        backend = getattr(old, "backend", None)
        if backend is not None:
            backend.close()
        self.settings.draft = drafter.name
        if self.conversation_id is not None:
            self.history.set_models(self.conversation_id, str(self.target_path), drafter.name)
        self.set_status(f"draft: {drafter.name} (it catches up on the conversation next turn)")

    # -- messages from workers ----------------------------------------------------------------
    def on_models_ready(self, message: ModelsReady) -> None:
        assert self.session is not None
        side = self.query_one(StatsPanel)
        if message.baseline:
            side.set_baseline(message.baseline,
                              f"target only, {BASELINE_TOKENS} greedy tokens at start")
        side.show(self.stats, self.session.engine.drafter.name)
        self.query_one(PromptInput).disabled = False
        self.query_one(PromptInput).focus()
        self.set_status(f"target {self.target_path.name} · draft {self.session.engine.drafter.name}"
                        " · Enter sends, Ctrl+J newline, Esc stops")

    def on_worker_failed(self, message: WorkerFailed) -> None:
        if self.busy and self.live is not None:
            self.live.note = "no reply: " + message.error
            self.live.refresh_content()
        self.busy = False
        self.set_status(f"[b red]error:[/] {message.error}")
        self.notify(message.error, severity="error", timeout=15)
        if self.session is not None:
            self.query_one(PromptInput).disabled = False

    def on_event_batch(self, message: EventBatch) -> None:
        """Take a round's events; drawing happens at most REDRAW_S apart (see `redraw`), so a
        fast GPU's fifty rounds a second cost the UI no more than a CPU's three."""
        assert self.live is not None
        tokens = [e for e in message.events if isinstance(e, TokenEvent)]
        if tokens:
            self.live.add_tokens(tokens)
        self.dirty = True
        for event in message.events:
            if isinstance(event, RoundEvent):
                self.stats.add_round(event)
                if self.stepping:
                    self.query_one(StepPanel).update(
                        describe_round(message.events, self.query_one(StatsPanel).baseline))
                    self.dirty = True
                    self.redraw()
            elif isinstance(event, TurnEvent):
                self.redraw()
                self._finish_turn(event)

    def redraw(self) -> None:
        if not self.dirty or self.live is None:
            return
        self.dirty = False
        self.live.refresh_content()
        if self.busy:
            self.query_one(StatsPanel).show(self.stats, self.draft_name)
        transcript = self.query_one("#transcript", VerticalScroll)
        if transcript.max_scroll_y - transcript.scroll_y <= 3:  # follow only when at the bottom
            transcript.scroll_end(animate=False)

    def _finish_turn(self, turn: TurnEvent) -> None:
        assert self.live is not None
        self.last_turn = turn
        side = self.query_one(StatsPanel)
        if turn.draft == "none" and turn.tokens_per_second:
            side.set_baseline(turn.tokens_per_second, f"target only, measured on the last "
                                                      f"target-only turn ({turn.n_tokens} tokens)")
        side.show(self.stats, turn.draft, final=turn)
        if turn.stop_reason == "cancelled":
            self.live.note = "stopped"
            self.live.refresh_content()
        stats = {k: getattr(turn, k) for k in (
            "n_tokens", "n_drafted", "n_accepted", "acceptance_rate", "mean_accepted_length",
            "tokens_per_second", "ttft_s", "target_passes", "draft", "k", "stop_reason")}
        if self.conversation_id is not None:
            self.history.add_message(self.conversation_id, "assistant", turn.text, stats)
        self.busy = False
        self.query_one(PromptInput).cursor_blink = True
        self.set_status(f"{turn.n_tokens} tokens · stop: {turn.stop_reason}")

    # -- user actions -------------------------------------------------------------------------
    @on(PromptInput.Submitted)
    def send(self, message: PromptInput.Submitted) -> None:
        if self.busy or self.session is None:
            self.notify("a reply is still being generated (Esc stops it)")
            return
        self.begin_reply(message.text)
        self.run_turn(message.text)

    def begin_reply(self, text: str) -> None:
        """Show and save the user's message and open an empty reply for the turn's events."""
        transcript = self.query_one("#transcript", VerticalScroll)
        user = LiveReply(role="user")
        user.set_plain(text)
        self.live = LiveReply(role="assistant")
        self.live.show_rejected = self.show_rejected
        transcript.mount(user, self.live)
        transcript.scroll_end(animate=False)
        if self.session is not None:  # a replay is not a conversation
            if self.conversation_id is None:
                self.conversation_id = self.history.new_conversation(
                    text[:60], str(self.target_path), self.draft_name, self.settings.system)
            self.history.add_message(self.conversation_id, "user", text)
        self.stats = TurnStats()
        self.cancel = threading.Event()
        self.step_gate.clear()
        self.busy = True
        if self.stepping:
            self.query_one(StepPanel).focus()
        self.query_one(PromptInput).cursor_blink = False  # a blink redraw costs generation time
        self.set_status("generating… (Esc stops)")

    def action_stop(self) -> None:
        if self.busy:
            self.cancel.set()
            self.step_gate.set()
            self.set_status("stopping after this round…")

    def action_step_mode(self) -> None:
        """Toggle step-through: each round waits for Space and is laid out in the step panel."""
        self.stepping = not self.stepping
        panel = self.query_one(StepPanel)
        panel.display = self.stepping
        if self.stepping:
            panel.update(Content.from_markup(f"[b]step-through[/b]  {EXPLAIN}\n\nSend a message;"
                                             " each round will wait for Space."))
            if self.busy:
                panel.focus()
        else:
            self.step_gate.set()
            self.query_one(PromptInput).focus()
        self.set_status("step-through on (F5 turns it off)" if self.stepping else "step-through off")

    def action_race(self) -> None:
        """Race the prompt in the input box (or the last one sent): target-only against the
        current drafter, each generated alone, then played back side by side."""
        if self.busy or self.session is None:
            self.notify("a race needs the models loaded and no reply running")
            return
        prompt = self.query_one(PromptInput)
        users = [text for role, text in self.session.conversation.messages if role == "user"]
        text = prompt.text.strip() or (users[-1] if users else "")
        if not text:
            self.notify("type a prompt first: F6 races it")
            return
        self.busy = True
        self.cancel = threading.Event()
        self.run_race(text)

    @work(thread=True, exclusive=True, group="turn")
    def run_race(self, text: str) -> None:
        assert self.session is not None
        engine = self.session.engine
        target = engine.target
        ids = target.tokenize(target.render_chat(
            Conversation(system=self.settings.system).with_user(text)))
        plain = SpeculativeEngine(target, NoDrafter(), engine.sampling,
                                  rng=np.random.default_rng(engine.sampling.seed))
        lanes = []
        try:
            for i, (label, racer) in enumerate((
                    ("target only", plain),
                    (f"speculative: {engine.drafter.name}, {engine.policy.name}", engine))):
                self.call_from_thread(self.set_status, f"race: {label}, alone ({i + 1}/2)… "
                                                       "(Esc stops)")
                engine.clear_caches()  # both lanes evaluate the whole prompt
                events = list(racer.generate(ids, self.settings.generation, self.cancel))
                lanes.append(Lane(label, events))
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))
            return
        self.post_message(RaceReady(lanes))

    def on_race_ready(self, message: RaceReady) -> None:
        self.busy = False
        stopped = any(e.stop_reason == "cancelled" for lane in message.lanes
                      for e in lane.events if isinstance(e, TurnEvent))
        self.set_status("race stopped" if stopped else "race ready: both lanes recorded")
        if not stopped:
            self.start_race(message.lanes)

    def action_next_round(self) -> None:
        self.step_gate.set()

    def action_run_on(self) -> None:
        if self.stepping:
            self.action_step_mode()

    def action_toggle_rejected(self) -> None:
        self.show_rejected = not self.show_rejected
        for reply in self.query(LiveReply):
            reply.show_rejected = self.show_rejected

    def action_draft_menu(self) -> None:
        if self.target_path is not None and self.session is not None:
            self.open_menu("draft", self.status_text)
            self.set_status("reading model headers…")

    def action_target_menu(self) -> None:
        if self.target_path is not None and self.session is not None:
            self.open_menu("target", self.status_text)
            self.set_status("reading model headers…")

    @work(thread=True, exclusive=True, group="menu")
    def open_menu(self, role: str, status: str) -> None:
        """Judge every GGUF on disk from its header off the UI thread (a Qwen header takes most
        of a second to read the first time), then show the menu."""
        assert self.session is not None and self.target_path is not None
        if role == "draft":
            choices = draft_choices(self.target_path)
            empty = "" if any(c.ok for c in choices[2:]) else \
                "No compatible draft model on disk for this target."
            menu = ModelMenu("Draft model", choices, self.session.engine.drafter.name, empty)
            done = self.swap_draft
        else:
            backend = getattr(self.session.engine.drafter, "backend", None)
            menu = ModelMenu("Target model", target_choices(backend.path if backend else None),
                             self.target_path.stem)
            done = self.swap_target
        self.call_from_thread(self.set_status, status)
        self.call_from_thread(self.push_screen, menu, lambda spec: spec and done(spec))

    def swap_target(self, spec: str) -> None:
        if self.busy:
            self.notify("stop the reply first (Esc), then change the target")
            return
        self.set_status(f"loading target {spec}…")
        self.query_one(PromptInput).disabled = True
        self.load_target(spec)

    @work(thread=True, exclusive=True, group="models")
    def load_target(self, spec: str) -> None:
        """A new target keeps the conversation (it is re-evaluated on the next turn); a draft
        model that cannot draft for it falls back to none, and the user is told why."""
        assert self.session is not None
        s, old = self.settings, self.session.engine
        try:
            target = load_target(spec, s.models)
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))
            return
        drafter, note = old.drafter, ""
        backend = getattr(drafter, "backend", None)
        if backend is not None:
            verdict = compat.check(target.path, backend.path)
            if not verdict.ok:
                backend.close()
                drafter, note = NoDrafter(), f"; draft set to none: {verdict.reason}"
        if not target.can_truncate and drafter.name != "none":
            drafter, note = NoDrafter(), f"; draft set to none: {NO_TRUNCATION}"
        old.target.close()
        self.session.engine = SpeculativeEngine(target, drafter, s.sampling, s.draft_settings,
                                                old.rng)
        self.target_path = target.path
        self.call_from_thread(self.set_status, f"target: {target.name}{note}")
        self.call_from_thread(setattr, self.query_one(PromptInput), "disabled", False)

    def swap_draft(self, spec: str) -> None:
        if self.busy:
            self.notify("stop the reply first (Esc), then swap the draft")
            return
        self.set_status(f"loading draft {spec}…")
        self.load_draft(spec)

    def action_new_chat(self) -> None:
        if self.busy or self.session is None:
            return
        self.session.conversation = Conversation(system=self.settings.system)
        self.session.engine.policy.costs.new_conversation()
        self.conversation_id = None
        self.query_one("#transcript", VerticalScroll).remove_children()
        self.set_status("new conversation")

    def current_settings(self) -> dict[str, Any]:
        s = self.settings
        return {
            "k": s.draft_settings.k, "policy": "adaptive" if s.draft_settings.adaptive else "fixed",
            "n_min": s.draft_settings.n_min, "p_min": s.draft_settings.p_min,
            "temperature": s.sampling.temperature, "top_k": s.sampling.top_k,
            "top_p": s.sampling.top_p, "seed": s.sampling.seed,
            "max_tokens": s.generation.max_tokens,
            "target_gpu_layers": s.models.target_gpu_layers,
            "draft_gpu_layers": s.models.draft_gpu_layers, "show_rejected": self.show_rejected,
        }

    def action_settings(self) -> None:
        if not self.busy:
            self.push_screen(SettingsScreen(self.current_settings()), self.apply_settings)

    def apply_settings(self, values: dict[str, Any] | None) -> None:
        """Use the new settings from the next turn on, and save them (never over a broken
        config file)."""
        if values is None:
            return
        merged = {**self.current_settings(), **values}
        s = self.settings
        s.draft_settings = DraftSettings(merged["k"], merged["n_min"], merged["p_min"],
                                         merged["policy"] == "adaptive")
        s.sampling = SamplingParams(merged["temperature"], merged["top_k"], merged["top_p"],
                                    merged["seed"])
        s.generation.max_tokens = merged["max_tokens"]
        s.models.target_gpu_layers = merged["target_gpu_layers"]
        s.models.draft_gpu_layers = merged["draft_gpu_layers"]
        if self.session is not None:
            engine = self.session.engine
            engine.draft_settings, engine.sampling = s.draft_settings, s.sampling
            engine.rng = np.random.default_rng(s.sampling.seed)
            model = getattr(engine.drafter, "model", engine.drafter)  # the combined drafter's
            if isinstance(model, ModelDrafter):
                model.sampling, model.rng = s.sampling, engine.rng
        if merged["show_rejected"] != self.show_rejected:
            self.action_toggle_rejected()
        if self.config.error:
            self.notify("settings in use but not saved: " + self.config.error, severity="warning")
            return
        engine_section = {k: v for k, v in merged.items() if v is not None and k != "show_rejected"}
        self.config.data["engine"] = engine_section
        self.config.data.setdefault("ui", {})["show_rejected"] = self.show_rejected
        self.config.save()
        self.set_status("settings saved")

    def action_history(self) -> None:
        if not self.busy and self.session is not None:
            self.push_screen(HistoryScreen(self.history), self.open_conversation)

    def open_conversation(self, conversation_id: int | None) -> None:
        """Show a saved conversation and continue it: the engine re-evaluates its tokens once."""
        if conversation_id is None or self.session is None:
            return
        stored = self.history.conversation(conversation_id)
        messages = self.history.messages(conversation_id)
        self.session.conversation = Conversation(
            system=stored.system, messages=[(m.role, m.content) for m in messages])
        self.conversation_id = conversation_id
        transcript = self.query_one("#transcript", VerticalScroll)
        transcript.remove_children()
        for m in messages:
            widget = LiveReply(role=m.role)
            widget.set_plain(m.content)
            transcript.mount(widget)
        transcript.scroll_end(animate=False)
        self.set_status(f"opened: {stored.title}")
