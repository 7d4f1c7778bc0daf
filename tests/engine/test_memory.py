"""What the policy remembers past the process: written as plain data and read back, it is
what the next process's first conversation starts from; anything else read back changes
nothing."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support.costs import STEP, M, k_of, warm

from specchat.engine.policy import CostModel, GuardedPolicy
from specchat.engine.policy.acceptance import Acceptance
from specchat.engine.policy.memory import recall, remembered
from specchat.engine.policy.reply import ReplyState
from specchat.engine.text_kind import CODE, TEXT
from specchat.engine.types import Draft, DraftCost

rounds = st.lists(st.tuples(
    st.sampled_from([M, "ngram"]), st.sampled_from([TEXT, CODE]), st.integers(0, 4),
    st.integers(0, 4), st.floats(0.0, 1.0), st.booleans()), max_size=60)
"""(source, kind, drafted, stood, the target's confidence, whether the pass was empty)."""


def learned_from(seen: list[tuple[str, str, int, int, float, bool]]) -> CostModel:
    costs = CostModel()
    acceptance, reply = costs.acceptance, ReplyState()
    for source, kind, drafted, stood, conf, empty in seen:
        reply.kind = kind
        reply.move_confidence([conf] * 3)
        stood = min(stood, drafted)
        tested = min(drafted, stood + 1)
        acceptance.observe(source, stood, tested, [conf] * drafted)
        acceptance.observe_target_conf(source, stood, tested, reply)
        acceptance.observe_pass(source, empty, reply)
    return costs


def estimates(acceptance: Acceptance) -> dict:
    """Every estimate the policy reads, as (successes, observations)."""
    counts = {}
    for source, rates in acceptance.by_position.items():
        counts[("position", source)] = [(r.hits, r.n) for r in rates]
    for source, rates in acceptance.by_confidence.items():
        counts[("confidence", source)] = [(r.hits, r.n) for r in rates]
    for key, rate in acceptance.empty.items():
        counts[("empty", key)] = (rate.hits, rate.n)
    for where, rates in acceptance.by_target_conf.items():
        counts[("target", where)] = [(r.hits, r.n) for r in rates]
    return counts


@given(rounds, st.lists(st.integers(0, 4096), max_size=12))
@example(seen=[], lengths=[1] * 9 + [0])  # a full memory, then a reply of no tokens
def test_what_is_read_back_is_what_was_learned_as_a_new_conversation_starts_from_it(seen,
                                                                                   lengths):
    """Through JSON and back: the running confidence's calibration as it was, the draft's own
    rates as the prior a new conversation keeps of them, the last replies' lengths with the
    one just written."""
    learned = learned_from(seen)
    for n in lengths:
        learned.start_turn()
        learned.reply.move_confidence([0.5] * n)
    data = json.loads(json.dumps(remembered(learned)))
    again = CostModel()
    assert recall(again, data)
    learned.start_turn()  # the next reply begins: the last one's length joins the others
    learned.new_conversation()
    assert estimates(again.acceptance) == pytest.approx(estimates(learned.acceptance))
    assert list(again.lengths.recent) == list(learned.lengths.recent)


@pytest.mark.parametrize("data", [
    None, [], {"format": 2, "sources": {}}, {"format": 1}, {"format": 1, "sources": []},
    {"format": 1, "sources": {M: {"by_position": [[3, 2]]}}},  # more hits than observations
    {"format": 1, "sources": {M: {"by_confidence": [[1, 2]]}}},  # not one a confidence bin
    {"format": 1, "sources": {M: {"empty": {"sometimes": [1, 2]}}}},
    {"format": 1, "sources": {M: {"by_target_conf": {TEXT: "high"}}}},
    {"format": 1, "sources": {M: {"by_position": [[1, 2]]}, "ngram": {"by_position": [["a", 2]]}}},
    {"format": 1, "sources": {}, "lengths": [96, -1]},
    {"format": 1, "sources": {}, "lengths": "96"},
])
def test_anything_else_read_back_changes_nothing(data):
    costs = learned_from([(M, TEXT, 3, 1, 0.9, False)] * 5)
    costs.lengths.add(40)
    before = estimates(costs.acceptance), list(costs.lengths.recent)
    assert not recall(costs, data)
    assert (estimates(costs.acceptance), list(costs.lengths.recent)) == before


def test_a_new_process_declines_to_catch_the_draft_up_where_earlier_replies_saw_it_refused():
    """A code block where the target was sure and the draft's tokens were refused anyway:
    remembered, the next process's first reply does not pay to catch the draft up on such
    text; with no memory it does, on the priors."""
    earlier = warm()
    earlier.writing(CODE)
    for _ in range(30):
        draft = Draft(tokens=[0, 1, 2], q=[1.0] * 3, source=M, uses_passes=True,
                      cost=DraftCost(behind=1, catchup_s=0.04))
        earlier.observe(draft, 0, 0.04, 0.04, 4, [0.999] * 3)
    data = json.loads(json.dumps(remembered(earlier)))
    for memory, drafts in ((None, True), (data, False)):
        costs = warm()
        costs.writing(CODE)
        costs.machine.learn_catchup(M, 0.0025)
        if memory is not None:
            assert recall(costs, memory)
        costs.observe(Draft(), 0, 0.0, STEP, 1, [0.999] * 10)
        k, plan = k_of(GuardedPolicy(3, costs=costs), behind=30)
        assert (k > 0) == drafts, plan.why


def test_a_memory_of_another_source_leaves_this_ones_priors():
    costs = CostModel()
    assert recall(costs, remembered(learned_from([("ngram", TEXT, 3, 0, 0.99, True)] * 9)))
    assert M not in costs.acceptance.by_position and ("ngram", False) in costs.acceptance.empty
