"""A conversation with a loaded model pair: messages in, events out.

The session renders the conversation with the target's chat template each turn; the engine's
KV-prefix rule then evaluates only the tokens that are new since the last turn. When the whole
conversation no longer fits the context, the context policy (chat/context.py) picks the turns
left out of the prompt, before the reply and again if the reply reaches the end of the
context. A stopped or cancelled reply is kept as it stands, so nothing typed or generated is
lost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specchat.chat import context
from specchat.engine import kvsync
from specchat.engine.events import ContextEvent, Event, TurnEvent
from specchat.engine.loop import GenerationSettings, SpeculativeEngine
from specchat.engine.types import FittedPrompt

if TYPE_CHECKING:
    from specchat.chat.learned import LearnedStore

GOES_ON = (" x", "x")
"""Two ways a message being typed may go on: what its renders share is what stays."""


def typed_prompt(prompt: Callable[[str], list[int]], typed: str) -> list[int]:
    """The prompt a reply to `typed` would start with, up to where the message may still
    tokenize otherwise as it goes on (the common part of its renders with two different
    continuations, less a token): what may be read before Enter."""
    ids = [prompt(typed + more) for more in GOES_ON]
    return ids[0][:max(0, kvsync.common_prefix(*ids) - 1)]


@dataclass
class Conversation:
    system: str | None = None
    messages: list[tuple[str, str]] = field(default_factory=list)


class ChatSession:
    def __init__(self, engine: SpeculativeEngine, conversation: Conversation | None = None,
                 context_policy: str = "rolling") -> None:
        self.engine = engine
        self.conversation = conversation or Conversation()
        self.context_policy = context_policy
        self.learned: LearnedStore | None = None
        """Where what the policy learned is kept after each reply (None: nowhere)."""

    def names(self) -> tuple[str, str]:
        """(target, draft) as the history keeps them: the target's file and the drafter."""
        return str(self.engine.target.path), self.engine.drafter.name

    def render(self, messages: Sequence[tuple[str, str]]) -> list[int]:
        target = self.engine.target
        return target.tokenize(target.render_chat(messages))

    def prompt(self, user_text: str, max_tokens: int) -> FittedPrompt:
        """The prompt for a reply to `user_text` and how many turns it leaves out."""
        conv = self.conversation
        return context.first_prompt(self.render, conv.system, conv.messages, user_text,
                                    n_ctx=self.engine.target.n_ctx, policy=self.context_policy,
                                    max_tokens=max_tokens)

    def read_ahead(self, typed: str, max_tokens: int) -> tuple[int, int]:
        """While the user types: both models read the prompt a reply to `typed` would start
        with, up to where the message may still tokenize otherwise as it goes on (the common
        part of its renders with two different continuations, less a token), so that Enter
        leaves only the rest to read; an edit rolls the caches back to what still stands.
        Returns the tokens the target and the drafter read."""
        ids = typed_prompt(lambda text: self.prompt(text, max_tokens).prompt_ids, typed)
        return self.engine.read_ahead(ids) if ids else (0, 0)

    def turn(
        self,
        user_text: str,
        settings: GenerationSettings | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Run one reply; the user message and the reply (even a partial, cancelled one) join
        the conversation together when the turn ends, so a failed turn leaves no half entry.
        A ContextEvent comes first when turns are left out of the prompt."""
        settings = settings or GenerationSettings()
        fitted = self.prompt(user_text, settings.max_tokens)
        if fitted.left_out:
            yield ContextEvent(fitted.left_out, len(fitted.prompt_ids))
        left_out = fitted.left_out
        conv = self.conversation

        def fit_prompt(reply: Sequence[int]) -> FittedPrompt | None:
            nonlocal left_out
            fitted = context.fit(self.render, conv.system, conv.messages, user_text,
                                 n_ctx=self.engine.target.n_ctx, policy=self.context_policy,
                                 tokens_left=settings.max_tokens - len(reply), reply=reply,
                                 at_least=left_out + 1)
            if fitted is not None:
                left_out = fitted.left_out
            return fitted

        for event in self.engine.generate(fitted.prompt_ids, settings, cancel, fit_prompt):
            if isinstance(event, TurnEvent):
                self.conversation.messages += [("user", user_text), ("assistant", event.text)]
            yield event
        if self.learned is not None:  # after the turn's last event: off the reply's clock
            self.learned.keep(self)
