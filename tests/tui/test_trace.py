"""Trace files: record a turn with `specchat ask --trace`, replay it in the app with no model."""

from __future__ import annotations

import asyncio

import pytest
from support.pilot import SIZE, until
from support.processes import specchat

from specchat.chat.history import HistoryStore
from specchat.config import Config
from specchat.engine.events import TokenKind, TurnEvent
from specchat.errors import SpecchatError
from specchat.trace import read_trace
from specchat.ui.app import SpecchatApp
from specchat.ui.launch import Launch
from specchat.ui.messages import EventsWaiting
from specchat.ui.widgets.live_reply import LiveReply
from specchat.ui.widgets.stats_panel import StatsPanel


@pytest.fixture(params=["chains", "trees"])
def recorded(tiny, tmp_path, request):
    """A turn recorded drafting chains, or draft trees (a branch beside every draft token)."""
    path = tmp_path / "turn.jsonl"
    trees = ["--tree", "--tree-p", "1"] if request.param == "trees" else []
    proc = specchat("ask", "trace me", "--target", str(tiny.target), "--draft", str(tiny.draft),
                    "--max-tokens", "30", "--policy", "fixed", "--k", "3", *trees,
                    "--trace", str(path), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return read_trace(path)


def lost_branches(pieces) -> list[str]:
    return [text for kind, text in pieces if kind is TokenKind.REJECTED and text.startswith("↳")]


def test_a_trace_holds_the_header_and_every_event(recorded):
    assert recorded.meta["draft"] == "tiny-draft" and recorded.meta["target"] == "tiny-target"
    assert recorded.meta["settings"]["k"] == 3 and recorded.prompt == "trace me"
    turn = recorded.events[-1]
    assert isinstance(turn, TurnEvent)
    kept = [e for e in recorded.events if getattr(e, "kind", None) not in (None, TokenKind.REJECTED)]
    assert [e.id for e in kept] == turn.token_ids
    lost = [e for e in recorded.events
            if getattr(e, "branch", False) and e.kind is TokenKind.REJECTED]
    assert bool(lost) is recorded.meta["settings"]["tree"]  # the tree is in the events


def test_replay_reproduces_the_transcript_and_the_stats_with_no_model(recorded, tmp_path):
    app = SpecchatApp(None, Launch(replay=recorded, replay_speed=50.0),
                      HistoryStore(tmp_path / "h.sqlite3"), Config(tmp_path / "config.toml"))
    turn = recorded.events[-1]

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.chat_screen.transcript.last_turn is not None)
            assert app.chat_screen.chat is None  # nothing was loaded
            reply = app.chat_screen.query(LiveReply).last()
            shown = "".join(p.text for p in reply.pieces if p.kind is not TokenKind.REJECTED)
            assert shown == turn.text
            stats = app.chat_screen.transcript.stats
            assert stats.tokens == turn.counts.n_tokens and stats.accepted == turn.counts.n_accepted
            assert app.chat_screen.transcript.last_turn == turn
            panel = str(app.chat_screen.query_one(StatsPanel).render())
            assert f"tokens            {turn.counts.n_tokens}" in panel
            trees = recorded.meta["settings"]["tree"]  # lost branches counted, the tree's numbers
            assert bool(lost_branches(reply.drawn_pieces())) is trees and ("tree: a round" in panel) is trees
    asyncio.run(scenario())
    assert app.history.conversations() == []  # a replay is not saved as a conversation


def woken_by(app: SpecchatApp, step: bool) -> list[int]:
    """How many times the screen was asked to draw at once (`EventsWaiting`): once each of the
    turn's first rounds was drawn in step-through, and by the turn's end."""
    woken: list[EventsWaiting] = []
    counts: list[int] = []

    def hook(message) -> None:
        if isinstance(message, EventsWaiting) and all(message is not m for m in woken):
            woken.append(message)  # once, not at each node it bubbles through

    async def scenario():
        async with app.run_test(size=SIZE, message_hook=hook) as pilot:
            screen = app.chat_screen
            for n in range(1, 4 if step else 1):
                await until(pilot, lambda n=n: screen.transcript.stats.rounds == n)
                counts.append(len(woken))  # drawn: asked for at once, or by a redraw
                screen.action_next_round()
            screen.turns.gate.switch(False)
            await until(pilot, lambda: screen.transcript.last_turn is not None)
            await pilot.pause()
            assert screen.transcript.stats.rounds == screen.transcript.last_turn.counts.rounds
            counts.append(len(woken))

    asyncio.run(scenario())
    return counts


def test_a_turn_wakes_the_screen_once_not_once_a_round(recorded, tmp_path):
    """The rounds wait in the turn's mailbox for the screen's redraw; only the turn's end asks
    to be drawn at once (a message a round took the UI thread from llama.cpp's threads), and
    in step-through each held round."""
    def app(step: bool) -> SpecchatApp:
        return SpecchatApp(None, Launch(replay=recorded, replay_speed=50.0, step=step),
                           HistoryStore(tmp_path / f"{step}.sqlite3"),
                           Config(tmp_path / f"{step}.toml"))

    assert recorded.events[-1].counts.rounds > 3
    assert woken_by(app(step=False), step=False) == [1]
    assert woken_by(app(step=True), step=True)[:3] == [1, 2, 3]


def test_a_file_that_is_not_a_trace_is_a_clear_error(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"type": "token"}\n')
    with pytest.raises(SpecchatError, match="not a specchat trace"):
        read_trace(bad)
    proc = specchat("replay", str(tmp_path / "missing.jsonl"), tmp_path=tmp_path)
    assert proc.returncode == 2 and "trace file not found" in proc.stderr
