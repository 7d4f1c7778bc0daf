"""One rule prices a verify batch that was not timed (engine/verify_curve.py), and the live
policy and the costs arithmetic (F7, tune, the predictions) both use it: they give the same cost
for the same curve at every size, timed or not."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from specchat.costs import Costs
from specchat.engine.policy import MachineCosts
from specchat.engine.verify_curve import PRIOR_BATCH_SLOPE, VerifyCurve

CURVES = st.lists(st.floats(1.0, 50.0), min_size=2, max_size=16).map(
    lambda xs: tuple(sorted(xs)))


@given(curve=CURVES, n=st.integers(1, 40))
def test_the_policy_and_the_costs_price_every_batch_alike(curve, n):
    model = MachineCosts(verify={m: ms / 1000 for m, ms in enumerate(curve, 1)})
    costs = Costs(verify=curve, draft=1.0)
    assert abs(model.verify_s(n) / model.verify_s(1) - costs.steps(n)) < 1e-9


@given(curve=CURVES, n=st.integers(1, 40))
def test_a_timed_size_is_its_timing_and_a_larger_one_costs_no_less_than_the_largest(curve, n):
    timed = VerifyCurve.from_sizes(curve)
    cost = timed.cost(n)
    if n <= len(curve):
        assert cost == curve[n - 1]
    else:
        assert cost >= curve[-1]


def test_between_two_timed_sizes_the_straight_line_and_one_size_the_prior():
    assert VerifyCurve({2: 10.0, 6: 30.0}).cost(4) == 20.0
    assert VerifyCurve({1: 10.0}).cost(3) == 10.0 * (1 + 2 * PRIOR_BATCH_SLOPE)
    assert VerifyCurve({}).cost(3) is None
