"""The transcript: the conversation's messages, and the reply in flight drawn from its event
stream, whichever source sent it (the engine, a recorded trace).

Events are taken as they come and drawn at the screen's redraw pace, so a fast GPU's fifty
rounds a second cost the UI no more than a CPU's three. The live numbers of the reply are kept
here too, with the same `TurnStats` the engine sums its turn with.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.containers import VerticalScroll
from textual.widgets import Static

from specchat.chat.history import StoredMessage
from specchat.engine.events import ContextEvent, Event, RoundEvent, StopReason, TokenEvent, TurnEvent
from specchat.engine.stats import TurnStats
from specchat.ui.slides import TurnSlide, file_name
from specchat.ui.widgets.live_reply import LiveReply
from specchat.ui.widgets.one_pass import OneLayoutPass
from specchat.wording import context_note

ENDS = {StopReason.CANCELLED: "stopped",
        StopReason.CONTEXT_FULL: "the context is full: Ctrl+N starts a new chat, or raise --ctx"}
"""The note under a reply that ended for one of these reasons."""
FOLLOW_LINES = 3
"""The view follows a growing reply only while it is this close to the bottom."""


class Transcript(OneLayoutPass, VerticalScroll):
    """While a reply grows past the view's end, the view is anchored (Textual's anchor): it
    follows the reply within the layout pass that makes room for it, where a scroll of its own
    after that pass would lay the screen out once more, until the user scrolls away; back at
    the bottom, it follows again. Only then: an anchor on text shorter than the view would
    draw it at the view's foot."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.reply: LiveReply | None = None
        self.stats = TurnStats()
        """The reply in flight's numbers, live."""
        self.last_turn: TurnEvent | None = None
        self.show_rejected = True
        self.expand_branches = False
        self.dirty = False

    def open_reply(self, text: str) -> None:
        """Show the user's message and an empty reply for the turn's events."""
        user = LiveReply(role="user")
        user.set_plain(text)
        self.reply = LiveReply(role="assistant")
        self.reply.show_rejected = self.show_rejected
        self.reply.expand_branches = self.expand_branches
        self.reply.growing = True
        self.mount(user, self.reply)
        self.scroll_end(animate=False)
        self.stats = TurnStats()

    def take(self, events: Iterable[Event]) -> None:
        """Take a round's events (or the turn's end); the tokens appear at the next redraw."""
        reply = self.reply
        assert reply is not None
        self.dirty = True
        for event in events:
            if isinstance(event, TokenEvent):
                reply.add_tokens([event])
            elif isinstance(event, ContextEvent):
                self.stats.add_context(event)  # live numbers leave it out like the turn's
                self.show_context(event)
            elif isinstance(event, RoundEvent):
                self.stats.add_round(event)
                reply.add_draft_own(event.draft_pieces)
            elif isinstance(event, TurnEvent):
                self.last_turn = reply.turn = event
                reply.growing = False
                if event.stop_reason in ENDS:
                    self.add_note(ENDS[event.stop_reason])
                self.redraw()

    def show_context(self, event: ContextEvent) -> None:
        """Say that turns were left out of the model's view: above the reply when it happened
        before it, under the reply when the reply ran into the limit."""
        assert self.reply is not None
        note = context_note(event)
        if event.during_reply:
            self.add_note(note)
        else:
            self.mount(Static(f"⋯ {note}", classes="context"), before=self.reply)

    def add_note(self, note: str) -> None:
        assert self.reply is not None
        self.reply.note = "; ".join(filter(None, (self.reply.note, note)))

    def fail(self, error: str) -> None:
        """The reply ended with an error: what it had written stays, with the error under it."""
        if self.reply is not None:
            self.reply.growing = False
            self.reply.note = ("cut off: " if self.reply.pieces else "no reply: ") + error
            self.dirty = True
            self.redraw()

    def redraw(self) -> bool:
        """Draw what came since the last redraw (False: nothing came), following the reply
        while the view is at the bottom."""
        if not self.dirty or self.reply is None:
            return False
        self.dirty = False
        self.reply.refresh_content()
        if not self.reply.growing:
            self.anchor(False)
        if not self.is_anchored and self.max_scroll_y - self.scroll_y <= FOLLOW_LINES:
            if self.reply.growing and self.max_scroll_y:
                self.anchor()
            else:
                self.scroll_end(animate=False)
        return True

    def show_messages(self, messages: Iterable[StoredMessage]) -> None:
        """Show a saved conversation in place of this one."""
        self.clear()
        for m in messages:
            widget = LiveReply(role=m.role)
            if not m.complete:
                widget.note = "interrupted: specchat stopped before this reply ended"
            widget.set_plain(m.content)
            self.mount(widget)
        self.scroll_end(animate=False)

    def slides(self, prefix: str) -> list[TurnSlide]:
        """The finished turns on screen as slides, numbered by their place in the conversation
        and named `<prefix>-<first words of the first message>`."""
        widgets = list(self.query(LiveReply))
        first = next((w for w in widgets if w.has_class("user")), None)
        name = f"{prefix}-{file_name(first.plain)}" if first else prefix
        slides, prompt, number = [], "", 0
        for widget in widgets:
            if widget.has_class("user"):
                prompt, number = widget.plain, number + 1
            elif widget.turn is not None and number:
                slides.append(TurnSlide(name, number, prompt, widget.drawn_pieces(), widget.turn))
        return slides

    def clear(self) -> None:
        self.remove_children()
        self.reply = None
        self.anchor(False)

    def set_shown(self, *, rejected: bool, branches: bool) -> None:
        """Draw rejected draft tokens or leave them out, and a draft tree's lost branches as
        their count or as their tokens, in every reply."""
        self.show_rejected, self.expand_branches = rejected, branches
        for reply in self.query(LiveReply):
            reply.show_rejected, reply.expand_branches = rejected, branches
