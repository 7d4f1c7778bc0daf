"""This machine's costs and what they buy: the arithmetic (property tests) and the screen that
shows them (Pilot on tiny real models, and a snapshot per theme with fixed costs)."""

from __future__ import annotations

import pytest
from conftest import SIZE, THEMES, make_app, ready, run_async, say, until
from hypothesis import given
from hypothesis import strategies as st

from specchat.costs import Costs, best_k, break_even, conditional, speedup
from specchat.engine.policy import expected_tokens
from specchat.ui.chat_screen import ChatScreen

CPU_LIKE = Costs(tuple(10.0 * (1 + 0.55 * i) for i in range(16)), draft=4.0, depth=300)
"""Verifying 4 tokens costs 2.65 steps, a draft pass 0.4 of one: a 2-core CPU's shape."""
curves = st.lists(st.floats(0.0, 1.5), min_size=15, max_size=15).map(
    lambda steps: Costs(tuple([10.0] + [10.0 * (1 + sum(steps[:i + 1])) for i in range(15)]),
                        draft=4.0))
rates = st.lists(st.floats(0.0, 1.0), min_size=8, max_size=8)


@given(costs=curves, accept=rates, k=st.integers(1, 8))
def test_a_free_drafter_on_a_flat_curve_gets_the_expected_accepted_length(costs, accept, k):
    flat_free = costs.flat().free_drafter()
    assert speedup(flat_free, accept, k) == pytest.approx(
        expected_tokens(accept[:k]) / (1 + 0.02 * k))
    assert speedup(costs, accept, k) <= speedup(costs.free_drafter(), accept, k)


@given(costs=curves, k=st.integers(1, 8))
def test_break_even_is_where_drafting_pays_exactly(costs, k):
    even = break_even(costs, k)
    if even is None:
        assert speedup(costs, [1.0] * k, k) <= 1.0
    else:
        assert speedup(costs, [even] * k, k) == pytest.approx(1.0, abs=1e-6)
        assert speedup(costs, [min(1.0, even + 0.01)] * k, k) >= 1.0


@given(accept=rates)
def test_best_k_is_the_best_of_every_k(accept):
    k, gain = best_k(CPU_LIKE, accept)
    assert gain == max(speedup(CPU_LIKE, accept, j) for j in range(9))
    assert speedup(CPU_LIKE, accept, k) == gain


def test_conditional_acceptance_from_the_turns_cumulative_rates():
    assert conditional([0.8, 0.6, 0.3]) == pytest.approx([0.8, 0.75, 0.5])


def test_the_costs_screen_times_this_machine_and_says_why(tiny, tmp_path):
    from specchat.ui.cost_screen import CostScreen

    app = make_app(tiny, tmp_path, max_tokens=16)

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await say(app, pilot, "how fast is this?")
            target_before = list(app.chat.session.engine.target.tokens)
            await pilot.press("f7")
            await until(pilot, lambda: isinstance(app.screen, CostScreen)
                        and app.screen.costs is not None)
            screen = app.screen
            text = str(screen.query_one("#why").render())
            costs = screen.costs
            assert len(costs.verify) == 16 and costs.draft > 0
            assert f"Verifying 4 tokens costs {costs.steps(4):.1f} target steps here" in text
            assert "break even" in text or "would not pay" in text
            assert app.chat.session.engine.target.tokens == target_before  # caches untouched
            before = screen.accept
            await pilot.press("plus")
            assert screen.accept[0] == pytest.approx(min(1.0, before[0] + 0.05))
            assert "what-if" in str(screen.query_one("#why").render())
            await pilot.press("g")
            assert "GPU-shaped curve" in str(screen.query_one("#why").render())
            await pilot.press("escape")
            assert isinstance(app.screen, ChatScreen)
            await say(app, pilot, "and after?")  # the conversation goes on where it was
    run_async(scenario)


@pytest.mark.parametrize("theme", THEMES)
def test_costs_screen_snapshot(snap_compare, snapshot_app, theme):
    from specchat.ui.cost_screen import CostScreen

    async def run_before(pilot):
        await ready(snapshot_app, pilot)
        snapshot_app.theme = theme
        snapshot_app.push_screen(CostScreen([0.82, 0.81, 0.82, 0.86], [(3, 0.74), (3, 0.81)], 3,
                                         "tiny-draft", costs=CPU_LIKE))
        await pilot.pause(0.2)

    assert snap_compare(snapshot_app, terminal_size=SIZE, run_before=run_before)


def test_a_slower_reply_says_why_from_what_it_measured():
    from specchat.engine.stats import TurnStats
    from specchat.ui.chat_screen import slower_why

    turn = TurnStats().turn_event(text="", token_ids=[1] * 31, prompt_ids=[0], wall_s=3.0,
                                  target_passes=11, draft_passes=30, draft="d", k=3,
                                  policy="fixed k=3", stop_reason="max_tokens")
    fields = dict(turn.to_json())
    fields.update(rounds=11, decode_s=2.0, tokens_per_second=15.0, speedup=0.75,
                  baseline_tokens_per_second=20.0, mean_accepted_length=3.0)
    fields.pop("type")
    from specchat.engine.events import TurnEvent

    slow = TurnEvent(**fields)
    # 10 rounds after the first took 2 s: 0.2 s = 4 target steps of 50 ms, for 3 tokens each
    assert slower_why(slow) == " · 0.75x: 4.0 steps a round for 3.0 tokens (why: F7, specchat tune)"
    assert slower_why(TurnEvent(**{**fields, "speedup": 1.2})) == ""
