"""The draft menu: every drafter for the current target, incompatible ones with their reason."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.command import Hit, Hits, Provider
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from specchat.catalog import compat
from specchat.catalog.catalog import Catalog, local_ggufs, model_folders
from specchat.errors import ModelFileError


@dataclass(frozen=True)
class DraftChoice:
    spec: str
    """What `--draft` would take: none, ngram, or a GGUF path."""
    label: str
    ok: bool
    reason: str


def draft_choices(target: Path) -> list[DraftChoice]:
    """none, n-gram, then every GGUF on disk (catalog and models folders) judged against the
    target from headers alone."""
    choices = [
        DraftChoice("none", "none: target only (the baseline)", True, ""),
        DraftChoice("ngram", "n-gram: prompt lookup, no draft model", True, ""),
    ]
    paths = {p.resolve() for p in local_ggufs()}
    catalog = Catalog.load()
    for model in catalog.models.values():
        for folder in model_folders():
            if (folder / model.file).is_file():
                paths.add((folder / model.file).resolve())
    for path in sorted(paths):
        if path == target.resolve():
            continue
        try:
            verdict = compat.check(target, path)
            choices.append(DraftChoice(str(path), path.stem, verdict.ok, verdict.reason))
        except ModelFileError as exc:
            choices.append(DraftChoice(str(path), path.stem, False, str(exc)))
    return choices


class DraftMenu(ModalScreen[str | None]):
    """Pick a drafter; incompatible models are listed, disabled, with the reason."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Close")]
    DEFAULT_CSS = """
    DraftMenu { align: center middle; }
    DraftMenu > Vertical { width: 90; height: auto; max-height: 80%; border: thick $primary;
                           background: $surface; padding: 1 2; }
    DraftMenu OptionList { height: auto; max-height: 20; }
    """

    def __init__(self, choices: list[DraftChoice], current: str) -> None:
        super().__init__()
        self.choices = choices
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"[b]Draft model[/b] (now: {self.current})")
            options = []
            for c in self.choices:
                text = c.label if c.ok else f"{c.label}  [dim]✗ {c.reason}[/dim]"
                options.append(Option(text, id=c.spec, disabled=not c.ok))
            yield OptionList(*options)
            if not any(c.ok for c in self.choices[2:]):
                yield Label("[dim]No compatible draft model on disk for this target.[/dim]")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)


class DraftCommands(Provider):
    """Command palette: 'draft: …' for each compatible drafter."""

    async def search(self, query: str) -> Hits:
        app = self.app
        target = getattr(app, "target_path", None)
        if target is None:
            return
        matcher = self.matcher(query)
        for choice in await asyncio.to_thread(draft_choices, target):
            if not choice.ok:
                continue
            text = f"draft: {choice.label}"
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), lambda s=choice.spec: app.swap_draft(s),
                          help="use this drafter from the next turn")
