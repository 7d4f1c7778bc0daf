"""The message box: Enter sends, Shift+Enter a new line, a paste arrives whole."""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea


class PromptInput(TextArea):
    """Multi-line input: Enter sends, Ctrl+J inserts a newline, a paste is inserted as it is.

    Enter is handled here, in the widget's own key handling, so it is taken in order with the
    characters typed before it: a message typed (or sent by a terminal) in one burst and then
    Enter is sent whole. A priority binding would run at the app before those keys reach the
    text area. A bracketed paste arrives as one Paste event and never sends.
    """

    BINDINGS = [
        Binding("enter", "submit", "Send"),
        Binding("ctrl+j", "newline", "Newline", show=False),
    ]

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.action_submit()
            return
        await super()._on_key(event)

    def action_submit(self) -> None:
        text = self.text.strip()
        if text:
            self.post_message(self.Submitted(text))
            self.clear()

    def action_newline(self) -> None:
        self.insert("\n")
