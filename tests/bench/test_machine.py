"""This machine's costs and what they buy: the arithmetic, as property tests (the screen that
shows them is tested in tests/tui)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specchat.engine.policy import expected_tokens
from specchat.machine import Costs, best_k, break_even, conditional_rates, speedup

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
