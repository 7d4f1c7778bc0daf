"""What the lesson's demonstrations run on, as the chat screen's models stand: the shipped
traces (asked for, or no model could load), the models loaded here, or the room's
llama-servers; None while the models load or a reply runs. One Recordings a model pair, so a
step's recordings are made once and shared by the steps after it."""

from __future__ import annotations

from specchat.chat.state import ChatState
from specchat.keeper import ModelKeeper
from specchat.lesson.recordings import (
    LiveRecordings,
    Recordings,
    ServerRecordings,
    TraceRecordings,
)
from specchat.server.session import ServerSession
from specchat.settings import Settings
from specchat.ui.launch import LessonLaunch
from specchat.ui.screens.lesson_screen import Source

LESSON_TOKENS = 64
"""Tokens a live demonstration's replies run to when the app, not `specchat lesson`, opened
the lesson (`specchat lesson --tokens` sets it)."""


class LessonSources:
    def __init__(self, settings: Settings, keeper: ModelKeeper, launch: LessonLaunch | None
                 ) -> None:
        self.settings, self.keeper = settings, keeper
        self.traces_only = launch is not None and launch.traces_only
        self.tokens = launch.tokens if launch else LESSON_TOKENS
        self.failed = ""
        """Why the models did not load (then the shipped traces stand in)."""
        self._made: tuple[object, Recordings] | None = None

    def source(self, chat: ChatState | None, busy: bool, prompts: dict[str, str]) -> Source:
        if self.traces_only or self.failed:
            traces = TraceRecordings()
            if self.failed:
                traces.where = f"the shipped traces (the models did not load: {self.failed})"
            return Source(traces)
        if chat is None:
            return Source(None, waiting="loading the models: the demonstration starts once "
                                        "they are ready")
        if busy:
            return Source(None, waiting="a reply is running: the demonstration starts after it")
        key = chat.engine or chat.session
        if self._made is None or self._made[0] is not key:
            self._made = (key, self._recordings(chat, prompts))
        return Source(self._made[1], on_model_thread=chat.engine is not None)

    def _recordings(self, chat: ChatState, prompts: dict[str, str]) -> Recordings:
        if chat.engine is not None:
            return LiveRecordings(self.keeper, chat.engine, prompts, self.tokens)
        assert isinstance(chat.session, ServerSession)
        return ServerRecordings(chat.session, self.settings.models.baseline_server, prompts,
                                self.tokens)
