"""A conversation with a loaded model pair: messages in, events out.

The session renders the whole conversation with the target's chat template each turn; the
engine's KV-prefix rule then evaluates only the tokens that are new since the last turn. A
stopped or cancelled reply is kept as it stands, so nothing typed or generated is lost.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from specchat.engine.events import Event, TurnEvent
from specchat.engine.loop import GenerationSettings, SpeculativeEngine


@dataclass
class Conversation:
    system: str | None = None
    messages: list[tuple[str, str]] = field(default_factory=list)

    def with_user(self, text: str) -> list[tuple[str, str]]:
        head = [("system", self.system)] if self.system else []
        return head + self.messages + [("user", text)]


class ChatSession:
    def __init__(self, engine: SpeculativeEngine, conversation: Conversation | None = None) -> None:
        self.engine = engine
        self.conversation = conversation or Conversation()

    def prompt_ids(self, user_text: str) -> list[int]:
        target = self.engine.target
        return target.tokenize(target.render_chat(self.conversation.with_user(user_text)))

    def turn(
        self,
        user_text: str,
        settings: GenerationSettings | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Run one reply; the user message and the reply (even a partial, cancelled one) join
        the conversation together when the turn ends, so a failed turn leaves no half entry."""
        ids = self.prompt_ids(user_text)
        for event in self.engine.generate(ids, settings, cancel):
            if isinstance(event, TurnEvent):
                self.conversation.messages += [("user", user_text), ("assistant", event.text)]
            yield event
