"""The chat in progress, with no UI in it: the session (engine and conversation), where it is
saved in the history, the recorder of the reply in flight, and what its turns measured.

The app's chat screen and `specchat chat` both keep their conversation here, so a message is
saved the same way (the user's message first, the reply as it grows) whichever front end sent
it, and the costs screen reads this conversation's acceptance from its own rounds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Protocol

from specchat.chat.history import HistoryStore, ReplyRecorder, StoredConversation, StoredMessage
from specchat.chat.learned import remember
from specchat.chat.session import ChatSession, Conversation
from specchat.costs import MeasuredTurn, conditional_rates
from specchat.engine.drafters import NO_DRAFT
from specchat.engine.events import Event, RoundEvent, TurnEvent
from specchat.engine.loop import GenerationSettings, SpeculativeEngine


class Session(Protocol):
    """What the chat needs of a session: a local ChatSession, or a llama-server's."""

    conversation: Conversation
    context_policy: str

    def names(self) -> tuple[str, str]: ...

    def read_ahead(self, typed: str, max_tokens: int) -> object: ...

    def turn(self, user_text: str, settings: GenerationSettings | None = None,
             cancel: threading.Event | None = None) -> Iterator[Event]: ...


class ChatState:
    def __init__(self, session: Session, history: HistoryStore) -> None:
        self.session = session
        self.history = history
        self.conversation_id: int | None = None
        """Its row in the history; None until the first message is saved."""
        self.recorder: ReplyRecorder | None = None
        """Saves the reply in flight as it grows."""
        self.turns: list[TurnEvent] = []
        """This conversation's finished turns."""
        self.turn_rounds: list[list[RoundEvent]] = []
        """The rounds of each finished turn, in order (beside `turns`)."""
        self._rounds_now: list[RoundEvent] = []
        self.rounds: list[tuple[int, int]] = []
        """(drafted, accepted) of this conversation's drafting rounds."""
        remember(session, history.path)  # what earlier replies on this target measured

    @property
    def engine(self) -> SpeculativeEngine | None:
        """The local engine (None when a llama-server generates the replies)."""
        return self.session.engine if isinstance(self.session, ChatSession) else None

    def begin(self, text: str) -> None:
        """Save the user's message (the first one opens the conversation in the history) and
        start saving the reply to it."""
        if self.conversation_id is None:
            target, draft = self.session.names()
            self.conversation_id = self.history.new_conversation(
                text[:60], target, draft, self.session.conversation.system)
        self.history.add_message(self.conversation_id, "user", text)
        self.recorder = ReplyRecorder(self.history, self.conversation_id)

    def turn(self, text: str, generation: GenerationSettings,
             cancel: threading.Event | None = None) -> Iterator[Event]:
        """The session's reply to `text` (call `begin` first, and `record` with each event)."""
        return self.session.turn(text, generation, cancel)

    def read_ahead(self, typed: str, max_tokens: int) -> None:
        """While the message is typed (on the model thread): the local models, or the
        llama-server, read its prompt so far (`read_ahead` of either session)."""
        if typed.strip():
            self.session.read_ahead(typed, max_tokens)

    def catch_up(self) -> None:
        """After a reply (on the model thread): a local draft model reads what it sat out."""
        if self.engine is not None:
            self.engine.catch_up()

    def record(self, event: Event) -> None:
        """Save the reply as it grows, and keep what the turn measured."""
        if self.recorder is not None:
            self.recorder(event)
        if isinstance(event, RoundEvent):
            self._rounds_now.append(event)
            if event.drafted:
                self.rounds.append((event.drafted, event.accepted))
        elif isinstance(event, TurnEvent):
            self.turns.append(event)
            self.turn_rounds.append(self._rounds_now)
            self._rounds_now = []

    def new(self) -> None:
        """Start a new conversation (saved once its first message is sent)."""
        self.session.conversation = Conversation(system=self.session.conversation.system)
        if self.engine is not None:
            self.engine.policy.costs.new_conversation()
        self._reset(None)

    def open(self, conversation_id: int) -> tuple[StoredConversation, list[StoredMessage]]:
        """Continue a saved conversation: the engine re-evaluates its tokens once, next turn."""
        stored = self.history.conversation(conversation_id)
        messages = self.history.messages(conversation_id)
        self.session.conversation = Conversation(
            system=stored.system, messages=[(m.role, m.content) for m in messages])
        self._reset(conversation_id)
        return stored, messages

    def _reset(self, conversation_id: int | None) -> None:
        self.conversation_id = conversation_id
        self.turns, self.rounds, self.turn_rounds, self._rounds_now = [], [], [], []

    def drafter_changed(self) -> None:
        """Note the new drafter in the history, from the next message on."""
        if self.conversation_id is not None:
            self.history.set_models(self.conversation_id, *self.session.names())

    def acceptance(self, k_max: int) -> list[float]:
        """Conditional acceptance per draft position over this conversation's rounds, up to the
        last position any round drafted (empty before one drafted)."""
        return [rate for rate, n in conditional_rates(self.rounds, k_max) if n]

    def measured_turns(self) -> list[MeasuredTurn]:
        """Every speculative turn that measured its speedup, with its rounds."""
        return [MeasuredTurn(t.k, t.counts.speedup, t.counts.baseline_tokens_per_second, tuple(r))
                for t, r in zip(self.turns, self.turn_rounds)
                if t.counts.speedup is not None and t.draft != NO_DRAFT]
