"""This machine's costs and what they buy: the arithmetic, as property tests (the screen that
shows them is tested in tests/tui)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.models import load

from specchat.costs import (
    Costs,
    MeasuredTurn,
    best_k,
    branch_stands,
    break_even,
    check_turn,
    conditional_rates,
    speedup,
    tree_speedup,
)
from specchat.engine.events import RoundEvent
from specchat.engine.policy import expected_tokens
from specchat.timing import spread, verify_times

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


def test_conditional_acceptance_counts_a_position_only_where_the_ones_before_it_stood():
    # (drafted, accepted) per round: position 2 is tried in three rounds, position 3 in one
    rates = conditional_rates([(3, 3), (3, 1), (3, 0), (2, 2), (1, 1)], 3)
    assert rates == [(0.8, 5), (pytest.approx(2 / 3), 3), (1.0, 1)]


def _turn(python_ms: float = 0.0, draft_extra_ms: float = 0.0, baseline_tps: float = 100.0,
          rounds: int = 6) -> MeasuredTurn:
    """A k=3 turn on CPU_LIKE's curve (step 10 ms): rounds of 3 drafted, 2 accepted, with
    `python_ms` between the passes and `draft_extra_ms` of draft catch-up each, its speedup
    measured as the engine does (decode rate over the baseline)."""
    draft_s, verify_s = (12.0 + draft_extra_ms) / 1000, 26.5 / 1000
    wall = draft_s + verify_s + python_ms / 1000
    events = (RoundEvent(0, 0, 0, 0, 0.0, 0.1, 1, 0.1),
              *(RoundEvent(i, 3, 3, 2, draft_s, verify_s, 3, 0.1 + i * wall)
                for i in range(1, rounds + 1)))
    measured = 3 / wall / baseline_tps
    return MeasuredTurn(3, measured, baseline_tps, events)


@given(st.floats(0.0, 1.0), st.floats(0.0, 0.5))
def test_a_turn_that_costs_what_the_curve_says_is_predicted_with_nothing_left_out(python, extra):
    check = check_turn(CPU_LIKE, _turn(python, extra))
    assert check is not None and check.left_out == ""
    assert check.predicted == pytest.approx(3 * 10 / (26.5 + 12))


@pytest.mark.parametrize("turn, named, ms", [
    (_turn(python_ms=20.0), "Python and sampling between the passes", 20),
    (_turn(draft_extra_ms=16.0), "draft passes beyond one per drafted token", 16),
    (_turn(baseline_tps=50.0), "a target step at the turn's depth: 20 ms against the 10 ms", None),
])
def test_a_turn_far_from_its_prediction_names_the_cost_left_out(turn, named, ms):
    check = check_turn(CPU_LIKE, turn)
    assert check is not None and abs(check.off) > 0.15
    assert check.left_out.startswith(named)
    if ms is not None:
        assert f"+{ms} ms a round beside the predicted round's 38 ms" in check.left_out


def test_a_turn_with_no_decode_round_has_nothing_to_check():
    assert check_turn(CPU_LIKE, MeasuredTurn(3, 1.0, 100.0, _turn().rounds[:1])) is None


def test_the_verify_curve_is_timed_interleaved_and_leaves_the_cache_as_it_was(tiny):
    target = load(tiny.target)
    target.eval(target.tokenize("the cat sat on the mat and then"), 0)
    before = list(target.tokens)
    times = verify_times(target, repeats=3, sizes=range(1, 5))
    assert [len(t) for t in times] == [3, 3, 3, 3] and all(ms > 0 for t in times for ms in t)
    assert target.tokens == before
    assert spread([1.0, 2.0, 3.0, 4.0, 100.0]) == 2.0  # the middle half, not the outlier
    target.close()


def test_the_curve_is_within_its_noise_where_timings_spread_wider_than_the_next_size_differs():
    assert CPU_LIKE.unresolved(8) == []  # no spread measured
    tight = replace(CPU_LIKE, verify_spread=(0.6,) * 16)  # sizes 5.5 ms apart
    assert tight.unresolved(8) == []
    wide = replace(CPU_LIKE, verify_spread=(0.6, 0.6, 9.0) + (0.6,) * 13)
    assert wide.unresolved(8) == [3] and wide.unresolved(2) == []


@given(costs=curves, accept=rates, k=st.integers(1, 8), stands=st.floats(0.0, 1.0))
def test_a_tree_pays_for_its_rows_only_with_what_its_alternatives_add(costs, accept, k, stands):
    """Alternatives that never stand only cost rows; on a flat curve with no draft cost, rows
    cost nearly nothing and any alternative that stands adds; a tree never beats its chain by
    more than its alternatives could add (one token a round)."""
    chain = speedup(costs, accept, k)
    assert tree_speedup(costs, accept, k, 0.0) <= chain + 1e-12
    flat = costs.flat().free_drafter()
    gpu_chain, gpu_tree = speedup(flat, accept, k), tree_speedup(flat, accept, k, stands)
    assert gpu_tree >= gpu_chain * (1 + 0.02 * k) / (1 + 0.02 * 2 * k) - 1e-12
    rows = costs.steps(2 * k + 1) + k * costs.draft_steps
    assert tree_speedup(costs, accept, k, stands) <= chain * (costs.steps(k + 1)
                                                            + k * costs.draft_steps) / rows + 1 / rows


def test_branch_stands_counts_the_alternatives_tested_not_those_drafted():
    def r(tested, stood, nodes=4):
        return RoundEvent(round=1, k=3, drafted=3, accepted=1, draft_s=0.0, verify_s=0.0,
                          emitted=2, t_s=0.0, branch_nodes=nodes, branches_tested=tested,
                          branch_stood=stood)
    assert branch_stands([r(2, True), r(1, False), r(0, False)]) == (pytest.approx(1 / 3), 3)
    assert branch_stands([r(0, False)]) is None
