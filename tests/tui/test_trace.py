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


def test_a_file_that_is_not_a_trace_is_a_clear_error(tmp_path):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"type": "token"}\n')
    with pytest.raises(SpecchatError, match="not a specchat trace"):
        read_trace(bad)
    proc = specchat("replay", str(tmp_path / "missing.jsonl"), tmp_path=tmp_path)
    assert proc.returncode == 2 and "trace file not found" in proc.stderr
