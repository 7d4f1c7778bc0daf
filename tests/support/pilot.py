"""Driving the app headless with Textual's Pilot on the tiny pair."""

from __future__ import annotations

import asyncio
from pathlib import Path

from specchat.chat.history import HistoryStore
from specchat.config import Config
from specchat.settings import DraftOptions, ModelOptions, SamplingOptions, Settings

SIZE = (150, 45)


THEMES = ["specchat-dark", "specchat-light", "specchat-colorblind", "specchat-projector"]


def make_app(tiny, tmp_path: Path, draft: str | None = None, max_tokens: int = 24,
             config: Config | None = None, history: HistoryStore | None = None,
             warm_up: bool = True, launch=None):
    """The app on the tiny pair with its own history (or `history`) and config file, started
    as `launch` says (else a chat, warmed up or not)."""
    from specchat.ui.app import SpecchatApp
    from specchat.ui.launch import Launch

    settings = Settings(
        ModelOptions(target=str(tiny.target), draft=draft or str(tiny.draft), n_ctx=1024,
                     threads=1),
        DraftOptions(policy="fixed", k=3), SamplingOptions(max_tokens=max_tokens))
    return SpecchatApp(settings, launch or Launch(warm_up=warm_up),
                       history or HistoryStore(tmp_path / "history.sqlite3"),
                       config or Config(tmp_path / "config.toml"))


async def until(pilot, condition, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if condition():
            return
        await pilot.pause(0.02)
    raise AssertionError("condition not reached in time")


async def ready(app, pilot) -> None:
    """The chat is open: models loaded, the input on, and the status line says so (its
    message comes after the chat is set, and on a busy machine a snapshot taken in between
    showed "loading …")."""
    from specchat.ui.widgets.prompt_input import PromptInput

    await until(pilot, lambda: app.chat_screen.chat is not None
                and not app.chat_screen.query_one(PromptInput).disabled
                and "Enter sends" in app.chat_screen.view.status_text)


async def say(app, pilot, text: str) -> None:
    """Type `text`, press Enter, and wait until the turn has ended (user + reply stored)."""
    from specchat.ui.widgets.prompt_input import PromptInput

    before = len(app.chat_screen.chat.session.conversation.messages)
    app.chat_screen.query_one(PromptInput).text = text
    app.chat_screen.query_one(PromptInput).focus()
    await pilot.press("enter")
    await until(pilot, lambda: len(app.chat_screen.chat.session.conversation.messages) == before + 2
                and not app.chat_screen.busy)


def run_async(scenario):
    """Run the scenario coroutine function to its end, and give back what it returns."""
    return asyncio.run(scenario())
