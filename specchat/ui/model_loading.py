"""Loading models for the chat: the pair at start (fetched first when it is missing), and a new
target or drafter mid-conversation from the menus (every GGUF on disk judged from its header off
the UI thread). Each load runs in a thread worker and the model is taken on the UI thread; a
swap keeps the conversation, and the new model catches up on it at the next turn.

`ModelLoading` is the chat screen's base: these flows and the few things they share with the
rest of the screen (the status line, whether a model is busy, the input box).
"""

from __future__ import annotations

from pathlib import Path

from textual import work
from textual.screen import Screen
from textual.widgets import Static
from textual.worker import get_current_worker

from specchat.chat.history import HistoryStore
from specchat.chat.session import ChatSession, Conversation
from specchat.chat.state import ChatState, Session
from specchat.engine.loop import SpeculativeEngine
from specchat.engine.stats import TurnStats
from specchat.errors import ModelNotInstalledError, SpecchatError
from specchat.host import ModelHost
from specchat.render import placement
from specchat.server.session import ServerSession
from specchat.settings import Settings
from specchat.ui.fetch_screen import FetchScreen
from specchat.ui.launch import Launch
from specchat.ui.layout_offer import LayoutOfferScreen, layout_offer
from specchat.ui.messages import (
    DrafterReady,
    ModelsReady,
    ServerReady,
    StatusLine,
    TargetReady,
    WorkerFailed,
)
from specchat.ui.model_menu import ModelMenu, draft_choices, target_choices
from specchat.ui.widgets import Legend, PromptInput, StatsPanel

MODEL_GROUPS = ("models", "turn")
"""Worker groups whose running workers make the screen busy."""


class ModelLoading(Screen):
    def __init__(self, settings: Settings, host: ModelHost, history: HistoryStore,
                 launch: Launch | None = None) -> None:
        super().__init__()
        self.settings, self.host, self.history = settings, host, history
        self.launch = launch or Launch()
        self.chat: ChatState | None = None
        """The conversation, once the models are loaded (None in a replay)."""
        self.status_text = ""

    @property
    def busy(self) -> bool:
        return any(w.node is self and w.group in MODEL_GROUPS and not w.is_finished
                   for w in self.app.workers)

    def set_status(self, text: str) -> None:
        self.status_text = text
        self.query_one("#status", Static).update(text, layout=False)  # one fixed line

    def on_status_line(self, message: StatusLine) -> None:
        self.set_status(message.text)

    def ready_for_input(self) -> None:
        """Enable the input box and give it the keys: it was disabled while models loaded, so
        a closing menu could not hand it the focus back, and typing went nowhere."""
        prompt = self.query_one(PromptInput)
        prompt.disabled = False
        prompt.focus()

    def target_path(self) -> Path | None:
        engine = self.chat.engine if self.chat is not None else None
        return engine.target.path if engine is not None else None

    @property
    def draft_name(self) -> str:
        if self.chat is not None:
            return self.chat.session.names()[1]
        replay = self.launch.replay
        return str(replay.meta.get("draft", "?")) if replay else "?"

    def local_engine(self, what: str) -> SpeculativeEngine | None:
        """The engine of models loaded here, or None (and the user told why) when a
        llama-server generates the replies, or no model is loaded yet."""
        if self.chat is None:
            return None
        if self.chat.engine is None:
            self.notify(f"{what} needs the models loaded here: a llama-server's models and "
                        "speculation are set when it starts (llama-server -m … -md …)")
        return self.chat.engine

    @work(thread=True, exclusive=True, group="models")
    def load_models(self, warm_up: bool) -> None:
        if self.settings.models.server:
            self.connect_server()
            return
        worker = get_current_worker()
        try:
            engine = self.host.load()
            if warm_up:
                self.host.warm_up(engine)
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
            self.load_models(self.launch.warm_up)

    def connect_server(self) -> None:
        """Ask the llama-server what it runs (on the worker thread of `load_models`)."""
        sampling = self.settings.sampling
        try:
            models = self.settings.models
            session = ServerSession.connect(models.server or "", models.baseline_server,
                                            sampling.params(), Conversation(system=sampling.system),
                                            sampling.context_policy)
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))
            return
        self.post_message(ServerReady(session))

    def on_models_ready(self, message: ModelsReady) -> None:
        sampling = self.settings.sampling
        self.start_chat(ChatSession(message.engine, Conversation(system=sampling.system),
                                    sampling.context_policy), placement(message.engine))

    def on_server_ready(self, message: ServerReady) -> None:
        self.query_one(Legend).show(counted_rejections=True)
        self.start_chat(message.session, message.session.where)

    def start_chat(self, session: Session, where: str) -> None:
        self.chat = ChatState(session, self.history)
        if self.chat.engine is not None:
            self.offer_layout()
        self.query_one(StatsPanel).show(TurnStats(), self.draft_name)
        self.ready_for_input()
        self.set_status(f"{where} · Enter sends, Ctrl+J newline, Esc stops")
        if self.history.problem:
            self.set_status(f"[b]{self.history.problem}[/]")
        elif interrupted := self.history.interrupted():
            self.notify(f"A reply in “{interrupted[0].title}” was cut off when specchat stopped: "
                        "Ctrl+O opens it (marked interrupted).", timeout=10)

    @work(thread=True, exclusive=True, group="offer")
    def offer_layout(self) -> None:
        """On a CPU with kernels for a better layout, offer to re-lay the default pair once."""
        if (offer := layout_offer(self.settings)) is not None:
            self.app.call_from_thread(self.app.push_screen, LayoutOfferScreen(offer),
                                      self._laid_out)

    def _laid_out(self, made: bool | None) -> None:
        """The pair was re-laid: load it (`default` now names the new files)."""
        if made and self.chat is not None and self.chat.engine is not None:
            self.chat.engine.close()
            self.chat = None
            self.query_one(PromptInput).disabled = True
            self.set_status("the default pair re-laid for this CPU; loading it…")
            self.load_models(self.launch.warm_up)

    def settings_changed(self) -> None:
        """The settings changed: the engine uses them from the next turn on."""
        if self.chat is None:
            return
        if self.chat.engine is not None:
            self.host.configure(self.chat.engine)
        elif isinstance(self.chat.session, ServerSession):
            self.chat.session.sampling = self.settings.sampling.params()
        self.chat.session.context_policy = self.settings.sampling.context_policy

    def action_draft_menu(self) -> None:
        if not self.busy and (engine := self.local_engine("changing the draft")):
            self.open_menu(engine, "draft", self.status_text)
            self.set_status("reading model headers…")

    def action_target_menu(self) -> None:
        if not self.busy and (engine := self.local_engine("changing the target")):
            self.open_menu(engine, "target", self.status_text)
            self.set_status("reading model headers…")

    @work(thread=True, exclusive=True, group="menu")
    def open_menu(self, engine: SpeculativeEngine, role: str, status: str) -> None:
        """Judge every GGUF on disk from its header off the UI thread (a Qwen header takes most
        of a second to read the first time), then show the menu."""
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
        self.app.call_from_thread(self.app.push_screen, menu,
                                  lambda choice: choice and done(choice))

    def swap_draft(self, choice: str) -> None:
        if self.busy or self.chat is None:
            self.notify("stop the reply first (Esc), then swap the draft")
            return
        if engine := self.local_engine("changing the draft"):
            self.set_status(f"loading draft {choice}…")
            self.load_draft(engine, choice)

    @work(thread=True, exclusive=True, group="models")
    def load_draft(self, engine: SpeculativeEngine, choice: str) -> None:
        try:
            drafter = self.host.load_drafter(engine, choice)
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))
            return
        if get_current_worker().is_cancelled:
            drafter.close()
            return
        self.post_message(DrafterReady(drafter, choice))

    def on_drafter_ready(self, message: DrafterReady) -> None:
        assert self.chat is not None and self.chat.engine is not None
        self.chat.engine.use_drafter(message.drafter)
        self.settings.models.draft = message.choice
        self.chat.drafter_changed()
        self.set_status(f"draft: {message.drafter.name} (it catches up on the conversation "
                        "next turn)")

    def swap_target(self, choice: str) -> None:
        if self.busy or self.chat is None:
            self.notify("stop the reply first (Esc), then change the target")
            return
        if engine := self.local_engine("changing the target"):
            self.set_status(f"loading target {choice}…")
            self.query_one(PromptInput).disabled = True
            self.load_target(engine, choice)

    @work(thread=True, exclusive=True, group="models")
    def load_target(self, engine: SpeculativeEngine, choice: str) -> None:
        """A new target keeps the conversation (it is re-evaluated on the next turn); a draft
        model that cannot draft for it falls back to none, and the user is told why."""
        try:
            fresh, note = self.host.load_target(engine, choice)
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))
            return
        self.post_message(TargetReady(fresh, note))

    def on_target_ready(self, message: TargetReady) -> None:
        assert self.chat is not None and isinstance(self.chat.session, ChatSession)
        self.chat.session.engine = message.engine
        self.set_status(f"target: {message.engine.target.name}{message.note}")
        self.ready_for_input()
