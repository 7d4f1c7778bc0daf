"""The chat screen's model part: the pair at start (fetched first when it is missing), a new
target or drafter mid-conversation from the menus (every GGUF on disk judged from its header off
the UI thread), the first-run layout offer, and the conversation on what is loaded.

Each load runs in a thread worker and the model is taken on the UI thread; a swap keeps the
conversation, and the new model catches up on it at the next turn. The screen learns what
happened from messages that bubble up to it (ChatStarted, StatusLine, WorkerFailed): this part
never touches the screen's widgets.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual import work
from textual.widget import Widget
from textual.worker import get_current_worker

from specchat.chat.history import HistoryStore
from specchat.chat.session import ChatSession
from specchat.chat.state import ChatState, Session
from specchat.choices import ModelRole
from specchat.engine.loop import SpeculativeEngine
from specchat.errors import ModelNotInstalledError, SpecchatError
from specchat.keeper import ModelKeeper
from specchat.loading import open_session
from specchat.server.session import ServerSession
from specchat.settings import Settings
from specchat.ui.messages import (
    ChatStarted,
    DrafterReady,
    ModelsReady,
    ServerReady,
    StatusLine,
    TargetReady,
    WorkerFailed,
)
from specchat.ui.screens.fetch_screen import FetchScreen
from specchat.ui.screens.layout_offer import LayoutOfferScreen, layout_offer
from specchat.ui.screens.model_menu import ModelMenu, draft_choices, target_choices


class ModelLoader(Widget):
    """Loads and swaps the models; `chat` is the conversation on them (None until loaded)."""

    DEFAULT_CSS = "ModelLoader { display: none; }"

    def __init__(self, settings: Settings, keeper: ModelKeeper, history: HistoryStore,
                 warm_up: bool, replying: Callable[[], bool], offer_layout: bool = True) -> None:
        super().__init__()
        self.settings, self.keeper, self.history, self.warm_up = settings, keeper, history, warm_up
        self.replying = replying
        """Whether a turn runs now: no model is swapped under it."""
        self.offer_layout = offer_layout
        """Offer to re-lay the default pair after it loads (not over a lesson in progress)."""
        self.chat: ChatState | None = None

    @property
    def busy(self) -> bool:
        """A model is loading (menus and offers do not count: they only read)."""
        return any(w.node is self and w.group == "models" and not w.is_finished
                   for w in self.app.workers)

    def target_path(self) -> Path | None:
        engine = self.chat.engine if self.chat is not None else None
        return engine.target.path if engine is not None else None

    def idle_engine(self, what: str) -> SpeculativeEngine | None:
        """The local engine while no reply runs and no model loads; else None, and the user is
        told why."""
        if self.busy or self.replying() or self.chat is None:
            self.notify(f"{what} waits for the models to load and the reply to end (Esc stops "
                        "it)")
            return None
        return self.local_engine(what)

    def local_engine(self, what: str) -> SpeculativeEngine | None:
        """The engine of models loaded here, or None (and the user told why) when a
        llama-server generates the replies, or no model is loaded yet."""
        if self.chat is None:
            return None
        if self.chat.engine is None:
            self.notify(f"{what} needs the models loaded here: a llama-server's models and "
                        "speculation are set when it starts (llama-server -m … -md …)")
        return self.chat.engine

    # -- the pair ---------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="models")
    def load(self) -> None:
        """Load the pair, or ask the llama-server the settings name what it runs."""
        if self.settings.models.server:
            self._connect_server()
            return
        worker = get_current_worker()
        try:
            engine = self.keeper.load()
            if self.warm_up:
                self.keeper.warm_up(engine)
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
            self.post_message(StatusLine("models fetched and verified; loading…"))
            self.load()

    def _connect_server(self) -> None:
        try:
            session, where = open_session(self.settings)
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))
            return
        self.post_message(ServerReady(session, where))

    def on_models_ready(self, message: ModelsReady) -> None:
        message.stop()
        self._start(*open_session(self.settings, message.engine))

    def on_server_ready(self, message: ServerReady) -> None:
        message.stop()
        self._start(message.session, message.where)

    def _start(self, session: Session, where: str) -> None:
        self.chat = ChatState(session, self.history)
        if self.chat.engine is not None and self.offer_layout:
            self._offer_layout()
        self.post_message(ChatStarted(where, server=self.chat.engine is None))
        if self.history.problem:
            self.post_message(StatusLine(f"[b]{self.history.problem}[/]"))
        elif interrupted := self.history.interrupted():
            self.notify(f"A reply in “{interrupted[0].title}” was cut off when specchat stopped: "
                        "Ctrl+O opens it (marked interrupted).", timeout=10)

    @work(thread=True, exclusive=True, group="offer")
    def _offer_layout(self) -> None:
        """On a CPU with kernels for a better layout, offer to re-lay the default pair once."""
        if (offer := layout_offer(self.settings)) is not None:
            self.app.call_from_thread(self.app.push_screen, LayoutOfferScreen(offer),
                                      self._laid_out)

    def _laid_out(self, made: bool | None) -> None:
        """The pair was re-laid: load it (`default` now names the new files)."""
        if made and self.chat is not None and self.chat.engine is not None:
            self.chat.engine.close()
            self.chat = None
            self.post_message(StatusLine("the default pair re-laid for this CPU; loading it…",
                                         input=False))
            self.load()

    def settings_changed(self) -> None:
        """The settings changed: the engine uses them from the next turn on."""
        if self.chat is None:
            return
        if self.chat.engine is not None:
            self.keeper.configure(self.chat.engine)
        elif isinstance(self.chat.session, ServerSession):
            self.chat.session.sampling = self.settings.sampling.params()
        self.chat.session.context_policy = self.settings.sampling.context_policy

    # -- the menus and swaps ----------------------------------------------------------------
    def open_menu(self, role: ModelRole, status: str) -> None:
        """The draft or target menu; `status` is the status line to show again once it is up."""
        if engine := self.idle_engine(f"changing the {role}"):
            self.post_message(StatusLine("reading model headers…"))
            self._menu(engine, role, status)

    @work(thread=True, exclusive=True, group="menu")
    def _menu(self, engine: SpeculativeEngine, role: ModelRole, status: str) -> None:
        """Judge every GGUF on disk from its header off the UI thread (a Qwen header takes most
        of a second to read the first time), then show the menu."""
        if role is ModelRole.DRAFT:
            choices = draft_choices(engine.target.path)
            empty = "" if any(c.ok for c in choices[2:]) else \
                "No compatible draft model on disk for this target."
            menu = ModelMenu("Draft model", choices, engine.drafter.name, empty)
            choose = self.swap_draft
        else:
            model = engine.drafter.model
            menu = ModelMenu("Target model", target_choices(model.path if model else None),
                             engine.target.path.stem)
            choose = self.swap_target
        self.post_message(StatusLine(status))
        self.app.call_from_thread(self.app.push_screen, menu,
                                  lambda choice: choice and choose(choice))

    def swap_draft(self, choice: str) -> None:
        if engine := self.idle_engine("changing the draft"):
            self.post_message(StatusLine(f"loading draft {choice}…"))
            self._load_draft(engine, choice)

    @work(thread=True, exclusive=True, group="models")
    def _load_draft(self, engine: SpeculativeEngine, choice: str) -> None:
        try:
            drafter = self.keeper.load_drafter(engine, choice)
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))
            return
        if get_current_worker().is_cancelled:
            drafter.close()
            return
        self.post_message(DrafterReady(drafter, choice))

    def on_drafter_ready(self, message: DrafterReady) -> None:
        message.stop()
        assert self.chat is not None and self.chat.engine is not None
        self.chat.engine.use_drafter(message.drafter)
        self.settings.models.draft = message.choice
        self.chat.drafter_changed()
        self.post_message(StatusLine(f"draft: {message.drafter.name} (it catches up on the "
                                     "conversation next turn)"))

    def swap_target(self, choice: str) -> None:
        if engine := self.idle_engine("changing the target"):
            self.post_message(StatusLine(f"loading target {choice}…", input=False))
            self._load_target(engine, choice)

    @work(thread=True, exclusive=True, group="models")
    def _load_target(self, engine: SpeculativeEngine, choice: str) -> None:
        """A new target keeps the conversation (it is re-evaluated on the next turn); a draft
        model that cannot draft for it falls back to none, and the user is told why."""
        try:
            fresh, note = self.keeper.load_target(engine, choice)
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))
            return
        self.post_message(TargetReady(fresh, note))

    def on_target_ready(self, message: TargetReady) -> None:
        message.stop()
        assert self.chat is not None and isinstance(self.chat.session, ChatSession)
        self.chat.session.engine = message.engine
        self.post_message(StatusLine(f"target: {message.engine.target.name}{message.note}",
                                     input=True))
