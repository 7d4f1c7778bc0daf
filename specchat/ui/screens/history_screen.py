"""Saved conversations: reopen, rename, delete, export to Markdown with per-turn stats."""

from __future__ import annotations

import time
from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from specchat.chat.history import HistoryStore


class HistoryScreen(ModalScreen[int | None]):
    """Enter reopens a conversation; r renames, d deletes, e exports it to Markdown."""

    BINDINGS = [
        Binding("escape", "dismiss(None)", "Close"),
        Binding("r", "rename", "Rename"),
        Binding("d", "delete", "Delete"),
        Binding("e", "export", "Export .md"),
    ]
    DEFAULT_CSS = """
    HistoryScreen { align: center middle; }
    HistoryScreen > Vertical { width: 90; height: auto; max-height: 80%; border: thick $primary;
                               background: $surface; padding: 1 2; }
    HistoryScreen OptionList { height: auto; max-height: 20; }
    HistoryScreen Input { display: none; }
    HistoryScreen Input.renaming { display: block; }
    """

    def __init__(self, store: HistoryStore, export_dir: Path | None = None) -> None:
        super().__init__()
        self.store = store
        self.export_dir = export_dir or Path.cwd()

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("[b]Conversations[/b]  (Enter open · r rename · d delete · e export)")
            yield OptionList(id="conversations")
            yield Input(placeholder="new title, Enter to save", id="title")

    def on_mount(self) -> None:
        self.reload()

    def reload(self) -> None:
        options = self.query_one(OptionList)
        options.clear_options()
        cut = {c.id for c in self.store.interrupted()}
        for c in self.store.conversations():
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(c.updated))
            mark = "  [b]interrupted[/b]" if c.id in cut else ""
            options.add_option(Option(f"{when}  {c.title}  [dim]({c.draft})[/dim]{mark}",
                                      id=str(c.id)))
        if options.option_count:
            options.highlighted = 0
        options.focus()

    def _selected(self) -> int | None:
        options = self.query_one(OptionList)
        if options.highlighted is None:
            return None
        return int(str(options.get_option_at_index(options.highlighted).id))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(str(event.option.id)))

    def action_delete(self) -> None:
        if (cid := self._selected()) is not None:
            self.store.delete(cid)
            self.reload()

    def action_export(self) -> None:
        if (cid := self._selected()) is not None:
            path = self.export_dir / f"specchat-conversation-{cid}.md"
            path.write_text(self.store.export_markdown(cid), encoding="utf-8")
            self.notify(f"exported to {path}")

    def action_rename(self) -> None:
        if self._selected() is not None:
            title = self.query_one(Input)
            title.add_class("renaming")
            title.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if (cid := self._selected()) is not None and event.value.strip():
            self.store.rename(cid, event.value.strip())
        event.input.value = ""
        event.input.remove_class("renaming")
        self.reload()
