"""Every snapshot test: the chat screen with every kind of token in every theme, the draft menu
with incompatible models and their reasons, and the costs screen in every theme. The reply is a
fixed event stream and the costs fixed numbers (timings included), so the pictures do not
depend on how fast this machine is."""

from __future__ import annotations

import pytest
from support.pilot import SIZE, THEMES, ready, until

from specchat.costs import Costs, MeasuredTurn
from specchat.engine.events import RoundEvent, TokenEvent, TokenKind
from specchat.engine.stats import TurnStats
from specchat.ui.screens.model_menu import ModelMenu

A, R, C, B, T = (TokenKind.ACCEPTED, TokenKind.REJECTED, TokenKind.CORRECTED, TokenKind.BONUS,
                 TokenKind.TARGET)
ROUNDS = [
    [(T, "Speculative")],
    [(A, " decoding"), (A, " lets"), (R, " the"), (C, " a")],
    [(A, " small"), (A, " draft"), (A, " model"), (B, " propose")],
    [(A, " tokens"), (R, ","), (R, " and"), (C, " that")],
    [(A, " the"), (A, " large"), (A, " model"), (B, " checks")],
]


def fixed_stream() -> list[list]:
    """Batches as the turn worker posts them: each round's tokens and summary, then the turn."""
    stats, batches, position, t = TurnStats(), [], 0, 0.0
    ids: list[int] = []
    for n, pieces in enumerate(ROUNDS):
        tokens = []
        for kind, text in pieces:
            tokens.append(TokenEvent(kind=kind, id=100 + len(ids), text=text, position=position,
                                     round=n, p=0.9, q=0.8, logit_gap=2.5))
            if kind is not R:
                ids.append(100 + len(ids))
                position += 1
        drafted = sum(k in (A, R) for k, _ in pieces)
        accepted = sum(k is A for k, _ in pieces)
        emitted = sum(k is not R for k, _ in pieces)
        t += 0.25
        summary = RoundEvent(n, 3 if n else 0, drafted, accepted, 0.1 if n else 0.0, 0.15,
                             emitted, t, "tiny-draft", expected_tokens=3.0 if n else None,
                             expected_s=0.25 if n else None,
                             catchup_tokens=12 if n == 1 else 0, catchup_s=0.04 if n == 1 else 0.0)
        stats.add_round(summary)
        batches.append(tokens + [summary])
    text = "".join(x for pieces in ROUNDS for k, x in pieces if k is not R)
    batches.append([stats.turn_event(text=text, token_ids=ids, prompt_ids=[1, 2, 3], wall_s=t,
                                     target_passes=len(ROUNDS), draft_passes=12,
                                     draft="tiny-draft", k=3, policy="fixed k=3",
                                     stop_reason="max_tokens")])
    return batches


@pytest.fixture
def app(snapshot_app):
    return snapshot_app


@pytest.mark.parametrize("theme", THEMES)
def test_chat_screen_with_every_kind_of_token(snap_compare, app, theme):
    async def run_before(pilot):
        await ready(app, pilot)
        app.theme = theme
        await pilot.pause()
        app.chat_screen.begin_reply("What is speculative decoding?")
        for batch in fixed_stream():
            app.chat_screen.turns.hand_over(batch)
        await until(pilot, lambda: app.chat_screen.transcript.last_turn is not None)
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.1)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_draft_menu_lists_incompatible_models_with_their_reason(snap_compare, app):
    async def run_before(pilot):
        await ready(app, pilot)
        await pilot.press("ctrl+d")
        await until(pilot, lambda: isinstance(app.screen, ModelMenu))
        await pilot.pause(0.1)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


CPU_LIKE = Costs(tuple(10.0 * (1 + 0.55 * i) for i in range(16)), draft=4.0, depth=300,
                 verify_spread=(0.6,) * 16)
"""Verifying 4 tokens costs 2.65 steps, a draft pass 0.4 of one: a 2-core CPU's shape."""


def _rounds(python_ms: float) -> tuple[RoundEvent, ...]:
    """A first round, then four rounds of 3 drafted, 2 accepted, costing what CPU_LIKE says
    plus `python_ms` between the passes."""
    wall = 0.012 + 0.0265 + python_ms / 1000
    return (RoundEvent(0, 0, 0, 0, 0.0, 0.1, 1, 0.1),
            *(RoundEvent(i, 3, 3, 2, 0.012, 0.0265, 3, 0.1 + i * wall) for i in range(1, 5)))


TURNS = [MeasuredTurn(3, 0.74, 100.0, _rounds(2.0)), MeasuredTurn(3, 0.50, 100.0, _rounds(21.5))]
"""A turn as the curve predicts it, and one that spent 21.5 ms a round in Python."""


@pytest.mark.parametrize("theme", THEMES)
def test_costs_screen_snapshot(snap_compare, snapshot_app, theme):
    from specchat.ui.screens.costs_screen import CostsScreen

    async def run_before(pilot):
        await ready(snapshot_app, pilot)
        snapshot_app.theme = theme
        snapshot_app.push_screen(CostsScreen([0.82, 0.81, 0.82, 0.86], TURNS, 3, "tiny-draft",
                                           costs=CPU_LIKE))
        await pilot.pause(0.2)

    assert snap_compare(snapshot_app, terminal_size=SIZE, run_before=run_before)
