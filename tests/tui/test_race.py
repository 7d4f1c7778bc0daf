"""Race mode and stepping through a replay: the workshop tools, on tiny real models."""

from __future__ import annotations

import asyncio

import pytest
from support.pilot import SIZE, make_app, ready, until
from support.processes import specchat

from specchat.chat.history import HistoryStore
from specchat.config import Config
from specchat.engine.events import TokenKind, TurnEvent
from specchat.trace import read_trace
from specchat.ui.app import SpecchatApp
from specchat.ui.launch import Launch
from specchat.ui.screens.race_screen import HOW, LanePanel, RaceScreen
from specchat.ui.widgets.prompt_input import PromptInput
from specchat.ui.widgets.step_panel import StepPanel


def record(tiny, tmp_path, name: str, draft: str):
    path = tmp_path / f"{name}.jsonl"
    proc = specchat("ask", "race me", "--target", str(tiny.target), "--draft", draft,
                    "--max-tokens", "30", "--policy", "fixed", "--k", "3", "--trace", str(path),
                    tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return read_trace(path)


def shown(panel: LanePanel) -> str:
    return "".join(p.text for p in panel.reply.pieces if p.kind is not TokenKind.REJECTED)


@pytest.fixture
def traces(tiny, tmp_path):
    return record(tiny, tmp_path, "plain", "none"), record(tiny, tmp_path, "spec", str(tiny.draft))


def test_a_race_of_two_traces_plays_both_lanes_on_one_clock(traces, tmp_path):
    plain, spec = traces
    app = SpecchatApp(None, Launch(race=[plain, spec], replay_speed=20.0),
                      HistoryStore(tmp_path / "h.sqlite3"), Config(tmp_path / "config.toml"))

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: isinstance(app.screen, RaceScreen))
            screen = app.screen
            await until(pilot, lambda: all(p.done_at is not None for p in screen.query(LanePanel)))
            lanes = list(screen.query(LanePanel))
            assert [p.lane.label for p in lanes] == ["target only", "speculative: tiny-draft, k=3"]
            for panel, trace in zip(lanes, (plain, spec)):
                turn = trace.events[-1]
                assert shown(panel) == turn.text and panel.stats.tokens == turn.counts.n_tokens
                assert panel.done_at == pytest.approx(panel.stats.t_last)
            assert HOW in str(screen.query_one("#how").render())
            assert "finished first" in str(screen.query_one("#verdict").render())
    asyncio.run(scenario())
    assert app.chat_screen.chat is None  # no model was loaded


def test_f6_races_the_prompt_each_lane_alone_and_keeps_the_chat_as_it_was(tiny, tmp_path):
    app = make_app(tiny, tmp_path, max_tokens=20)

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            app.chat_screen.query_one(PromptInput).text = "who wins?"
            await pilot.press("f6")
            await until(pilot, lambda: isinstance(app.screen, RaceScreen))
            screen = app.screen
            await until(pilot, lambda: all(p.done_at is not None for p in screen.query(LanePanel)))
            plain, spec = screen.query(LanePanel)
            assert plain.lane.label == "target only"
            assert spec.lane.label == "speculative: tiny-draft, fixed k=3"
            assert shown(plain) == shown(spec)  # greedy: the same reply, at different speeds
            assert spec.stats.drafted > 0 and plain.stats.drafted == 0
            turns = [e for lane in (plain, spec) for e in lane.lane.events
                     if isinstance(e, TurnEvent)]
            assert all(t.prompt_token_ids == turns[0].prompt_token_ids for t in turns)
            await pilot.press("escape")
            assert not isinstance(app.screen, RaceScreen)
            assert app.chat_screen.chat.session.conversation.messages == []  # a race is not part of the chat
            assert not app.chat_screen.busy
    asyncio.run(scenario())


def test_a_replay_in_step_mode_advances_one_round_per_key(traces, tmp_path):
    _, spec = traces
    app = SpecchatApp(None, Launch(replay=spec, replay_speed=50.0, step=True),
                      HistoryStore(tmp_path / "h.sqlite3"), Config(tmp_path / "config.toml"))

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            gate = app.chat_screen.turns.gate
            await until(pilot, lambda: app.chat_screen.transcript.stats.rounds == 1)
            await until(pilot, lambda: gate.held)  # the next round waits for the key
            assert app.chat_screen.transcript.stats.rounds == 1
            for n in (2, 3):
                await pilot.press("space")
                await until(pilot, lambda n=n: app.chat_screen.transcript.stats.rounds == n)
                await until(pilot, lambda: gate.held)
                assert app.chat_screen.transcript.stats.rounds == n
            assert "verdict" in str(app.chat_screen.query_one(StepPanel).render())
            await pilot.press("r")
            await until(pilot, lambda: app.chat_screen.transcript.last_turn is not None)
            assert app.chat_screen.transcript.last_turn == spec.events[-1]
    asyncio.run(scenario())


def test_shipped_traces_are_listed_and_open_by_name(tmp_path):
    proc = specchat("replay", "--list", tmp_path=tmp_path)
    assert proc.returncode == 0 and "code-0.5b-draft-k3" in proc.stdout
    assert read_trace("code-0.5b-draft-k3").meta["draft"].startswith("qwen2.5-coder-0.5b")
