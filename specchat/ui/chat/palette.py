"""The command palette's own commands: "draft: …" for each drafter that can draft for the
target, judged from GGUF headers off the UI thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from textual.command import Hit, Hits, Provider

from specchat.ui.screens.model_menu import draft_choices


def draft_commands(target: Callable[[], Path | None], use: Callable[[str], None]) -> type[Provider]:
    """A provider offering the drafters for `target()` (none while no model is loaded);
    choosing one calls `use` with what --draft would take."""

    class DraftCommands(Provider):
        async def search(self, query: str) -> Hits:
            path = target()
            if path is None:
                return
            matcher = self.matcher(query)
            for choice in await asyncio.to_thread(draft_choices, path):
                if not choice.ok:
                    continue
                text = f"draft: {choice.label}"
                score = matcher.match(text)
                if score > 0:
                    yield Hit(score, matcher.highlight(text), lambda v=choice.value: use(v),
                              help="use this drafter from the next turn")

    return DraftCommands
