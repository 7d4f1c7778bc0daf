"""The chat screen: transcript, stats panel, step panel and prompt, and the turn that feeds them.

It is built of parts: `ModelLoader` (ui/model_loading.py) loads and swaps the models and holds
the conversation on them, `TurnRunner` (ui/turn_runner.py) runs the turn's workers. Both post
messages (ui/messages.py) with what they made; this screen's widgets change only in its handlers,
on the UI thread. Whether it is busy is read off the parts' running workers. Esc sets the turn's
cancel flag; the engine ends the turn after the round in flight with both caches consistent, and
the partial reply is kept and marked as stopped.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header

from specchat.chat.history import HistoryStore
from specchat.chat.state import ChatState
from specchat.choices import ModelRole
from specchat.cpu import physical_cores
from specchat.engine.events import ContextEvent, Event, TurnEvent
from specchat.keeper import ModelKeeper
from specchat.lesson.demos import DEMOS
from specchat.lesson.follow import LessonSync
from specchat.lesson.script import load_lesson
from specchat.settings import Settings
from specchat.trace import Lane, Trace, lane_label
from specchat.ui.chat.chat_view import ChatView
from specchat.ui.chat.lesson_source import LessonSources
from specchat.ui.chat.model_loading import ModelLoader
from specchat.ui.chat.palette import draft_commands
from specchat.ui.chat.turn_runner import TurnRunner
from specchat.ui.launch import Launch
from specchat.ui.messages import ChatStarted, EventsWaiting, StatusLine, WorkerFailed
from specchat.ui.screens.costs_screen import K_MAX, CostsScreen
from specchat.ui.screens.history_screen import HistoryScreen
from specchat.ui.screens.lesson_screen import LessonScreen
from specchat.ui.screens.race_screen import RaceScreen
from specchat.ui.slides import TurnSlide
from specchat.ui.widgets.prompt_input import PromptInput
from specchat.ui.widgets.transcript import Transcript
from specchat.wording import context_note, drafting_words, slower_why


def redraw_every_s(cores: int | None) -> float:
    """Seconds between redraws of a streaming reply: a quarter of a second, or half on two
    cores or fewer, where each redraw is taken from llama.cpp's threads (in tmux on two cores,
    a redraw every 0.5 s against 0.25 s: the UI thread 7.9% of a core against 11.5%, the reply
    decoded 1.10-1.29x faster in each of four pairs; docs/lab/)."""
    return 0.5 if cores is not None and cores <= 2 else 0.25


class ChatScreen(Screen):
    BINDINGS = [
        Binding("escape", "stop", "Stop reply"),
        # priority: the prompt (a TextArea) would take ctrl+d as "delete right" otherwise
        Binding("ctrl+d", "menu('draft')", "Draft", priority=True),
        Binding("ctrl+t", "menu('target')", "Target", priority=True),
        Binding("ctrl+r", "toggle_rejected", "Rejected on/off", priority=True),
        # not in the footer: it matters only with --tree (docs/guide/app.md)
        Binding("ctrl+b", "toggle_branches", "Tree branches", show=False, priority=True),
        Binding("ctrl+n", "new_chat", "New chat", priority=True),
        Binding("ctrl+o", "history", "History", priority=True),
        Binding("ctrl+s", "app.settings", "Settings", priority=True),
        Binding("f5", "step_mode", "Step mode", priority=True),
        Binding("f6", "race", "Race", priority=True),
        Binding("f7", "costs", "Costs (why)", priority=True),
        Binding("f9", "lesson", "Lesson", priority=True),
    ]

    def __init__(self, settings: Settings, keeper: ModelKeeper, history: HistoryStore,
                 launch: Launch | None = None) -> None:
        super().__init__()
        self.settings, self.keeper, self.history = settings, keeper, history
        self.launch = launch or Launch()
        self.turns = TurnRunner(self.launch.replay_speed)
        self.models = ModelLoader(settings, keeper, history, self.launch.warm_up,
                                  lambda: self.turns.busy, offer_layout=self.launch.lesson is None)
        self.view = ChatView()
        self.lessons = LessonSources(settings, keeper, self.launch.lesson)
        self.show_rejected = True
        self.expand_branches = False
        """Lost draft-tree branches drawn as their tokens, not their count (ctrl+b)."""
        # the command palette's drafters for this screen (Textual reads the calling screen's)
        self.COMMANDS = {  # type: ignore[misc]
            draft_commands(self.models.target_path, self.models.swap_draft)}

    # -- layout -----------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        yield self.view
        yield Footer()
        yield self.models
        yield self.turns

    @property
    def chat(self) -> ChatState | None:
        """The conversation, once the models are loaded (None in a replay)."""
        return self.models.chat

    @property
    def busy(self) -> bool:
        return self.turns.busy or self.models.busy

    @property
    def draft_name(self) -> str:
        if self.chat is not None:
            return self.chat.session.names()[1]
        replay = self.launch.replay
        return str(replay.meta.get("draft", "?")) if replay else "?"

    @property
    def transcript(self) -> Transcript:
        return self.view.transcript

    def set_status(self, text: str) -> None:
        self.view.set_status(text)

    def on_status_line(self, message: StatusLine) -> None:
        self.set_status(message.text)
        if message.input is not None:
            self.view.take_input(message.input)

    def on_mount(self) -> None:
        """Start what the app was asked for: load the models, or replay or race traces."""
        # typing may start while the models load (kept, sent once they are); a replay or a race
        # loads none, so there is nothing to send to
        self.view.take_input(not self.launch.race and self.launch.replay is None)
        self.transcript.show_rejected = self.show_rejected
        self.set_interval(redraw_every_s(physical_cores()), self.redraw)
        launch = self.launch
        if launch.step:
            self.action_step_mode()
        if launch.lesson is not None:
            self.action_lesson()
        if launch.lesson is not None and launch.lesson.traces_only:
            self.view.take_input(False)
            self.set_status("lesson on the shipped traces: no model loaded")
        elif launch.race:
            self.set_status("race replay: no model loaded (Esc closes the race)")
            self.app.push_screen(RaceScreen([Lane(lane_label(t.meta), t.events) for t in launch.race],
                                            launch.replay_speed))
        elif launch.replay is not None:
            self.start_replay(launch.replay, launch.replay_speed)
        else:
            models = self.settings.models
            self.set_status(f"asking the llama-server at {models.server}…" if models.server else
                            f"loading {models.target} with draft {models.draft}…")
            self.models.load()

    def on_chat_started(self, message: ChatStarted) -> None:
        self.view.start(self.draft_name, message.server)
        self.set_status(f"{message.where} · Enter sends, Ctrl+J newline, Esc stops")

    def on_worker_failed(self, message: WorkerFailed) -> None:
        self.take_events()  # what the turn wrote before it failed
        if self.chat is None and self.launch.lesson is not None:
            self.lessons.failed = message.error  # the lesson goes on with the shipped traces
        if message.message is not None:
            self.view.fail(message.error, message.message)
        self.set_status(f"[b red]error:[/] {message.error}")
        self.notify(message.error, severity="error", timeout=15)
        if self.chat is not None:
            self.view.take_input(True)

    # -- a turn -----------------------------------------------------------------------------
    @on(PromptInput.Submitted)
    def send(self, message: PromptInput.Submitted) -> None:
        if self.busy or self.chat is None:  # the message goes back in the box, not lost
            self.view.prompt.text = message.text
            self.notify(f"not ready yet ({self.view.status_text}): Enter sends it once it is"
                        if self.chat is None else "a reply is still being generated (Esc stops it)")
            return
        self.begin_reply(message.text)
        self.turns.reply(self.chat, message.text, self.settings.sampling.generation())

    @on(PromptInput.Changed)
    def read_typed(self, message: PromptInput.Changed) -> None:
        """The models read the message as it is typed, so Enter leaves little to read."""
        if self.chat is not None and message.text_area.text.strip():
            self.turns.read_typed(self.chat, message.text_area.text,
                                  self.settings.sampling.max_tokens)

    def begin_reply(self, text: str) -> None:
        """Show (and, in a conversation, save) the user's message and open an empty reply."""
        self.view.open_reply(text, self.turns.gate.on)
        if self.chat is not None:  # a replay is not a conversation
            self.chat.begin(text)
        self.turns.begin()

    def start_replay(self, trace: Trace, speed: float) -> None:
        """Play a recorded turn at its recorded pace (times `speed`); no model is loaded."""
        meta = trace.meta
        self.set_status(f"replay ({speed:g}x) of a turn recorded with {meta.get('target', '?')} "
                        f"and draft {meta.get('draft', '?')}: no model loaded")
        self.begin_reply(trace.prompt)
        self.turns.replay(trace, speed)

    def on_events_waiting(self, _message: EventsWaiting) -> None:
        self.take_events()

    def take_events(self) -> None:
        """Take the rounds' events waiting in the turn's mailbox, one round at a time."""
        for batch in self.turns.mailbox.take():
            self.take_round(batch)

    def take_round(self, events: list[Event]) -> None:
        """Draw a round's events, save them (the conversation) and say what happened."""
        self.view.draw(events, self.turns.gate.on, self.draft_name)
        for event in events:
            if self.chat is not None:
                self.chat.record(event)
            if isinstance(event, ContextEvent):
                self.set_status(f"{context_note(event)} (context policy: "
                                f"{self.settings.sampling.context_policy})")
            elif isinstance(event, TurnEvent):
                self.set_status(f"[b]{self.history.problem}[/]" if self.history.problem else
                                f"{event.counts.n_tokens} tokens · stop: {event.stop_reason}"
                                + slower_why(event) + drafting_words(event))

    def redraw(self) -> None:
        self.take_events()
        self.view.redraw(self.draft_name if self.busy else None)

    # -- actions ----------------------------------------------------------------------------
    def action_stop(self) -> None:
        if self.busy:
            self.turns.stop()
            self.set_status("stopping after this round…")

    def action_step_mode(self) -> None:
        """Toggle step-through: each round waits for Space and is laid out in the step panel."""
        stepping = not self.turns.gate.on
        self.turns.gate.switch(stepping)
        self.view.switch_steps(stepping, self.busy)

    def action_next_round(self) -> None:
        self.turns.gate.step()

    def action_run_on(self) -> None:
        if self.turns.gate.on:
            self.action_step_mode()

    def action_toggle_rejected(self) -> None:
        self.show_rejected = not self.show_rejected
        self.transcript.set_shown(rejected=self.show_rejected, branches=self.expand_branches)

    def action_toggle_branches(self) -> None:
        self.expand_branches = not self.expand_branches
        self.transcript.set_shown(rejected=self.show_rejected, branches=self.expand_branches)

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
        if (engine := self.models.idle_engine("a race")) is None or self.chat is None:
            return
        users = [text for role, text in self.chat.session.conversation.messages if role == "user"]
        text = self.view.prompt.text.strip() or (users[-1] if users else "")
        if not text:
            self.notify("type a prompt first: F6 races it")
            return
        self.turns.begin()
        self.turns.race(self.keeper, engine, text)

    def action_costs(self) -> None:
        """Why speculation is faster or slower here: this machine's costs and this
        conversation's acceptance, plotted (CostsScreen)."""
        engine = self.models.idle_engine("the costs screen (it times the models)")
        if engine is None or self.chat is None:
            return
        self.app.push_screen(CostsScreen(self.chat.acceptance(K_MAX), self.chat.measured_turns(),
                                       engine.draft_settings.k, engine.drafter.name, engine))

    def action_lesson(self) -> None:
        """F9: the guided lesson, its demonstrations on these models (or the room's servers,
        or the shipped traces); in a room, every tab follows the presenter's."""
        launch = self.launch.lesson
        lesson = launch.lesson if launch else load_lesson(None, frozenset(DEMOS))
        self.app.push_screen(LessonScreen(
            lesson, lambda: self.lessons.source(self.chat, self.busy, lesson.prompts),
            LessonSync.from_env(), launch.start if launch else 0))

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

    def action_menu(self, role: str) -> None:
        """The draft or target menu (Ctrl+D, Ctrl+T)."""
        self.models.open_menu(ModelRole(role), self.view.status_text)
