"""The draft-length policy: its cost model, its choices, and what the engine reports of it."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.processes import specchat

from specchat.engine.policy import AdaptivePolicy, CostModel, FixedPolicy, MachineCosts, expected_tokens
from specchat.engine.text_kind import CODE, TEXT, text_kind
from specchat.engine.types import Draft, DraftCost


@given(a=st.floats(0.01, 0.99), k=st.integers(0, 12))
def test_expected_tokens_is_the_leviathan_formula_for_a_constant_rate(a, k):
    assert expected_tokens([a] * k) == pytest.approx((1 - a ** (k + 1)) / (1 - a))


def machine(verify_ms: dict[int, float], pass_ms: float = 0.0, source: str = "ngram/8+",
            accept: float = 0.95, rounds: int = 40) -> CostModel:
    """A cost model that has watched `rounds` rounds: verify times by batch size, and drafts
    from `source` standing with probability `accept` at each position."""
    costs = CostModel()
    for n, ms in verify_ms.items():
        costs.observe(Draft(tokens=[0] * (n - 1)), 0, 0.0, ms / 1000, n)
    verify_7 = costs.machine.verify_s(7)
    for r in range(rounds):
        tokens = [1, 2, 3, 4, 5, 6]
        stood = next((i for i in range(6) if (r * 7 + i * 3) % 100 >= accept * 100), 6)
        costs.observe(Draft(tokens=tokens, q=[1.0] * 6, source=source), stood, pass_ms / 1000,
                      verify_7, 7)
    return costs


def target_steps(costs: CostModel, confidences: list[float]) -> None:
    """Plain target steps (90 ms) whose tokens the target chose with these probabilities."""
    for conf in confidences:
        costs.observe(Draft(), 0, 0.0, 0.090, 1, [conf])


def test_verify_cost_is_measured_where_seen_and_a_line_elsewhere():
    costs = machine({1: 80, 2: 130, 3: 180})
    assert costs.machine.verify_s(2) == pytest.approx(0.130)
    assert costs.machine.verify_s(5) > costs.machine.verify_s(3) > costs.machine.verify_s(1)
    assert costs.machine.verify_s(4) == pytest.approx(0.230)  # the line through 80, 130, 180 ms


def test_adaptive_drafts_long_when_verify_is_cheap_and_drafts_stand():
    cheap = machine({1: 80, 2: 85, 3: 90, 4: 95, 5: 100, 6: 105, 7: 110, 8: 115, 9: 120})
    plan = AdaptivePolicy(8, cheap).plan(cap=100)
    assert plan.k("ngram/8+", False) >= 4 and not plan.declined


def test_adaptive_declines_when_no_length_pays_and_says_so():
    steep = machine({n: 80 * n for n in range(1, 10)}, accept=0.5)
    policy = AdaptivePolicy(8, steep)
    plans = [policy.plan(cap=100) for _ in range(40)]
    ks = [p.k("ngram/8+", False) for p in plans]
    assert all(p.declined for p, k in zip(plans, ks) if k == 0) and ks.count(0) >= 37
    # it says why, from the rates it compared (a plain step of 80 ms: 12.5 tok/s)
    why = next(p.why for p, k in zip(plans, ks) if k == 0)
    assert "draft was expected at" in why and "plain steps 12.5" in why
    # where a perfect draft could not pay either, it never probes
    hopeless = AdaptivePolicy(8, machine({n: 100 * n for n in range(1, 10)}, pass_ms=50,
                                         source="draft-model", accept=0.5))
    assert all(hopeless.plan(cap=100).k("draft-model", True, behind=1) == 0 for _ in range(40))


def test_a_source_whose_rounds_brought_less_than_plain_steps_is_declined():
    """The prediction says drafting pays (cheap passes, 90% standing), but the rounds actually
    took far longer than it priced (here: passes that were slow for a reason the model does
    not see): after a few such rounds the policy declines, whatever it predicts, where the
    target is as sure of the text as it was then; where it is surer (code after prose), those
    rounds say nothing, and it drafts."""
    costs = machine({n: 80 + 10 * (n - 1) for n in range(1, 10)}, pass_ms=10,
                    source="draft-model", accept=0.9, rounds=8)
    policy = AdaptivePolicy(8, costs)
    target_steps(costs, [0.75] * 3)
    assert policy.plan(cap=100).k("draft-model", True, behind=1) > 0
    for _ in range(8):
        costs.observe(Draft(tokens=[1, 2, 3], q=[1.0] * 3, source="draft-model", uses_passes=True,
                            cost=DraftCost(behind=1, catchup_s=1.0)), 3, 1.0, 0.1, 4, [0.75] * 4)
    plan = policy.plan(cap=100)
    assert plan.k("draft-model", True, behind=1) == 0 and plan.declined
    brought, plain = map(float, re.findall(r"[\d.]+(?= tok/s|$)", plan.why))
    assert plan.why.startswith("its drafts here brought") and brought < plain
    target_steps(costs, [0.995] * 12)
    assert policy.plan(cap=100).k("draft-model", True, behind=1) > 0


def test_a_model_draft_stops_where_its_confidence_no_longer_pays():
    costs = machine({n: 80 + 40 * (n - 1) for n in range(1, 10)}, pass_ms=10,
                    source="draft-model", accept=0.9)
    plan = AdaptivePolicy(8, costs).plan(cap=100)
    assert plan.k("draft-model", True, behind=1) == 8  # the confidence rule decides how far
    assert plan.keep("draft-model", 0, 0.99)
    assert not plan.keep("draft-model", 1, 0.05)


def test_a_model_pass_is_paid_for_before_it_runs_and_not_again_after():
    """One token at most (cap 1), a pass of 36 ms against a plain step of 40 and a second row
    for 1 ms more: drafting pays, barely. Before the pass runs, a token could not earn its pass
    back even at the draft's most trusted confidence, so it is not worth running; once a pass
    has run (its cost sunk), its token is kept, as its row alone costs 1 ms."""
    costs = machine({1: 40, 2: 41}, pass_ms=36, source="m", accept=0.95)
    plan = AdaptivePolicy(8, costs).plan(cap=1)
    assert plan.k("m", True, behind=1) == 1 and not plan.declined
    assert not plan.worth_a_pass("m", 0)
    assert plan.keep("m", 0, 0.99)
    assert FixedPolicy(3).plan(cap=3).worth_a_pass("m", 2)  # llama.cpp's rule: on to k


def test_fixed_policy_keeps_k_and_the_confidence_floor():
    plan = FixedPolicy(3, p_min=0.5).plan(cap=2)
    assert plan.k("anything", True) == 2  # never more than fits
    assert plan.keep("anything", 0, 0.6) and not plan.keep("anything", 0, 0.4)


def test_ask_reports_the_policy_each_rounds_k_and_the_predicted_rate(tiny, tmp_path):
    proc = specchat("ask", "one two three one two three one two", "--target", str(tiny.target),
                    "--draft", f"ngram+{tiny.draft}", "--policy", "adaptive", "--k", "5",
                    "--max-tokens", "40", "--json", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    rounds = [e for e in events if e["type"] == "round"]
    turn = events[-1]
    assert turn["policy"] == "adaptive k<=5" and turn["draft"].startswith("ngram-3..12+")
    assert all(0 <= r["k"] <= 5 and r["drafted"] <= r["k"] for r in rounds)
    assert all(r["expected_tokens"] >= 1 and r["expected_s"] > 0 for r in rounds[1:])
    assert turn["declined_rounds"] == sum(r["declined"] for r in rounds)
    predicted = sum(r["expected_tokens"] for r in rounds[1:]) / sum(r["expected_s"]
                                                                     for r in rounds[1:])
    assert turn["predicted_tokens_per_second"] == pytest.approx(predicted)
    plain = specchat("ask", "hi", "--target", str(tiny.target), "--draft", "ngram", "--policy",
                     "adaptive", "--max-tokens", "12", tmp_path=tmp_path)
    assert "adaptive k<=3 (k: rounds" in plain.stderr and "predicted" in plain.stderr


def test_ngram_plus_something_that_is_not_a_model_is_a_clear_error(tiny, tmp_path):
    proc = specchat("ask", "hi", "--target", str(tiny.target), "--draft", "ngram+none",
                    tmp_path=tmp_path)
    assert proc.returncode == 2 and "after 'ngram+' name a draft model" in proc.stderr


Q4_0_SHAPE = (1.0, 1.9, 2.6, 1.7, 2.5, 2.9, 3.3, 3.2, 4.0)
"""The verify curve of the default target re-laid as Q4_0 on an AVX2 CPU (docs/lab/):
4 and 8 rows cheap, 3 and 5 not."""


def test_a_known_shape_prices_the_batch_sizes_not_yet_seen():
    costs = CostModel(MachineCosts(shape=Q4_0_SHAPE))
    costs.observe(Draft(), 0, 0.0, 0.040, 1)
    assert costs.machine.verify_s(4) == pytest.approx(0.040 * 1.7)
    assert costs.machine.verify_s(3) == pytest.approx(0.040 * 2.6)
    costs.observe(Draft(tokens=[1, 2, 3]), 3, 0.0, 0.050, 4)
    assert costs.machine.verify_s(4) == pytest.approx(0.050)  # what it measured wins


def test_where_the_step_is_slower_than_when_the_shape_was_timed_a_batch_costs_what_it_did():
    """The plain step at 36 ms where the shape was timed at 21: a batch of 4 at the 46 ms it
    took then, a batch of 2 no less than a step; where the step is faster, both scale."""
    shape = (1.0, 1.25, 1.91, 2.19)
    slow = CostModel(MachineCosts(shape=shape, shape_step_s=0.021))
    slow.observe(Draft(), 0, 0.0, 0.036, 1)
    assert slow.machine.verify_s(4) == pytest.approx(0.021 * 2.19)
    assert slow.machine.verify_s(2) == pytest.approx(0.036)
    fast = CostModel(MachineCosts(shape=shape, shape_step_s=0.021))
    fast.observe(Draft(), 0, 0.0, 0.018, 1)
    assert fast.machine.verify_s(4) == pytest.approx(0.018 * 2.19)


def test_a_batch_is_padded_only_to_a_size_known_to_cost_less():
    costs = CostModel(MachineCosts(shape=Q4_0_SHAPE))
    assert [costs.machine.batch_for(n) for n in range(1, 10)] == [1, 4, 4, 4, 5, 6, 7, 8, 9]
    costs.observe(Draft(tokens=[1, 2, 3]), 3, 0.0, 0.070, 4)  # measured: 4 rows, 70 ms
    assert costs.machine.check_s(3) == pytest.approx(0.070)
    assert costs.machine.verify_s(3) == pytest.approx(0.070 / 1.7 * 2.6)  # scaled by the shape
    assert CostModel().machine.batch_for(3) == 3  # no known curve: nothing to pad to


@given(shape=st.lists(st.floats(0.5, 6.0), min_size=1, max_size=12),
       seen=st.dictionaries(st.integers(1, 14), st.floats(0.01, 1.0), max_size=5),
       n=st.integers(1, 14))
def test_padding_never_costs_more_and_never_pads_a_plain_step(shape, seen, n):
    costs = CostModel(MachineCosts(shape=tuple(shape)))
    costs.machine.verify.update(seen)
    m = costs.machine.batch_for(n)
    assert n <= m <= n + 4
    assert costs.machine.check_s(n) <= costs.machine.verify_s(n)
    assert costs.machine.batch_for(1) == 1
    if m > n:
        assert costs.machine.verify_s(m) < 0.95 * costs.machine.verify_s(n)


def test_a_model_draft_grows_through_an_expensive_batch_to_a_cheap_one():
    """At 1 or 2 tokens (2 or 3 rows) the next token alone costs more than it brings (the
    rule that looks one token ahead stopped there), but going on lands on a cheap batch: the
    draft stops on 4 or 8 rows, never between."""
    costs = CostModel(MachineCosts(shape=Q4_0_SHAPE))
    costs.observe(Draft(), 0, 0.0, 0.040, 1)
    for _ in range(30):
        costs.observe(Draft(tokens=[1, 2, 3], q=[1.0] * 3, conf=[0.99] * 3, source="m",
                            uses_passes=True, cost=DraftCost(later_draws=2)),
                      3, 0.012, 0.040 * 1.7, 4)
    plan = AdaptivePolicy(8, costs).plan(cap=100)
    assert plan.k("m", True, behind=1) == 8
    kept = 0
    while kept < 8 and plan.keep("m", kept, 0.99):
        kept += 1
    assert kept in (3, 7)


def test_a_declining_policy_probes_ever_more_rarely_and_a_probe_keeps_its_draft():
    """Each probe of a model drafter first catches up on the tokens it missed: after 16
    declined rounds, then 32, then 64 while probing does not make drafting pay; a probe keeps
    every token it drafts (it is there to measure acceptance) and drafts a cheap batch."""
    costs = machine({n: 80 + 60 * (n - 1) for n in range(1, 10)}, accept=0.3)
    policy = AdaptivePolicy(8, costs)
    probes = []
    for r in range(200):
        plan = policy.plan(cap=100)
        k = plan.k("ngram/8+", False)
        if k:
            probes.append(r)
            assert not plan.declined and 1 <= k <= 3
            assert all(plan.keep("ngram/8+", i, 0.01) for i in range(k))
    assert probes == [15, 47, 111]


def test_a_model_far_behind_catches_up_where_the_rest_of_the_reply_pays_for_it():
    """At a reply's start a declining model has missed the whole prompt. Catching up is paid
    once, then the model stays in step: it starts drafting where the reply has enough tokens
    left to earn the catch-up back, and not near the end of the reply."""
    costs = machine({n: 90 + 40 * (n - 1) for n in range(1, 10)}, source="m", accept=0.9)
    costs.machine.pass_s["m"], costs.machine.catchup_token_s["m"] = 0.015, 0.005
    policy = AdaptivePolicy(8, costs)
    policy.start_turn()
    target_steps(costs, [0.97, 0.97])  # the target's confidence at two positions: too few
    waiting = policy.plan(cap=200)
    assert waiting.k("m", True, behind=60) == 0 and waiting.declined
    target_steps(costs, [0.97])
    assert policy.plan(cap=200).k("m", True, behind=60) > 0
    late = policy.plan(cap=3)
    assert late.k("m", True, behind=60) == 0 and late.declined
    # a catch-up that only the reply's later tokens could earn back is not made
    assert policy.plan(cap=200).k("m", True, behind=200) == 0
    # in step (behind by the last correction), even a short rest of the reply drafts
    assert policy.plan(cap=3).k("m", True, behind=1) > 0


def test_a_catch_up_is_earned_back_over_as_many_tokens_as_the_last_replies_ran():
    """The prompt a declining model missed is caught up where a reply as long as the last ones
    (their median) earns it back, however far past the first 32 tokens; before any reply has
    ended, after short ones, or with one long one among short ones, the horizon stays at 32
    tokens, and it never reaches past the reply's token limit."""
    costs = machine({n: 90 + 40 * (n - 1) for n in range(1, 10)}, source="m", accept=0.9)
    costs.machine.pass_s["m"], costs.machine.catchup_token_s["m"] = 0.015, 0.005
    policy = AdaptivePolicy(8, costs)

    def reply(tokens: int, behind: int = 200, cap: int = 1000) -> bool:
        """A reply of `tokens` target steps; whether, 3 tokens in, the model `behind` by that
        many tokens catches up to draft."""
        policy.start_turn()
        target_steps(costs, [0.97] * 3)
        made = policy.plan(cap=cap).k("m", True, behind=behind) > 0
        target_steps(costs, [0.5] * (tokens - 3))
        return made

    assert reply(10, behind=60)  # 32 tokens earn back a short catch-up
    assert [reply(n) for n in (12, 400, 400)] == [False] * 3  # medians 10, 11, 12
    assert reply(400)  # the median of 10, 12, 400, 400: 206 tokens
    assert costs.lengths.left(3) == 203
    assert not reply(400, cap=20)


def unsure_then_sure(costs: CostModel, unsure: int, sure: int, draft_s: float,
                     verify_s: float) -> None:
    """Rounds of model "m" (3 tokens, 3 passes, a batch of 4): first `unsure` rounds where the
    target was unsure of the text (0.55) and no token stood, then `sure` rounds where it was
    sure (0.99) and all stood."""
    for is_sure, rounds in ((False, unsure), (True, sure)):
        for _ in range(rounds):
            costs.observe(Draft(tokens=[1, 2, 3], source="m", uses_passes=True,
                                cost=DraftCost(catchup_s=0.03, later_draws=2)),
                          3 if is_sure else 0, draft_s, verify_s, 4,
                          [0.99 if is_sure else 0.55] * 4)


def test_a_model_behind_catches_up_only_where_the_target_finds_the_text_predictable():
    """The target's confidence comes free with every row. Calibrated against what stood (here:
    drafts stood where the target was sure and failed where it was not), it decides whether a
    model that is behind pays to catch up: not while the target is unsure, although the rates
    per position (mostly sure text) say drafting pays, and without probing either; yes where
    the target is sure again."""
    costs = machine({n: 90 + 40 * (n - 1) for n in range(1, 10)}, source="m", accept=0.9)
    costs.machine.pass_s["m"], costs.machine.catchup_token_s["m"] = 0.015, 0.005
    unsure_then_sure(costs, 12, 30, 0.09, 0.17)
    assert costs.predicted_accept("m") > 0.9
    policy = AdaptivePolicy(8, costs)
    policy.start_turn()
    target_steps(costs, [0.6, 0.5, 0.55])
    # (fitted to rise with the confidence, the level pools with the untouched prior below it)
    assert costs.predicted_accept("m") < 0.35 < costs.acceptance.position_rate("m", 0)
    unsure = [policy.plan(cap=200) for _ in range(40)]
    assert all(p.k("m", True, behind=20 + r) == 0 and p.declined for r, p in enumerate(unsure))
    target_steps(costs, [0.99] * 4)
    assert policy.plan(cap=200).k("m", True, behind=64) > 0


def declining_model() -> CostModel:
    """Model "m" on a steep verify curve, 30% of its drafts standing: a policy declines it."""
    costs = machine({n: 80 + 60 * (n - 1) for n in range(1, 10)}, source="m", accept=0.3)
    costs.machine.pass_s["m"], costs.machine.catchup_token_s["m"] = 0.015, 0.004
    return costs


def probes_at(policy: AdaptivePolicy, confidence: float) -> list[int]:
    """The rounds, of a new reply's first 40, in which the policy probes model "m" (behind by
    every round it sat out) where the target is `confidence` sure of the text."""
    policy.start_turn()
    target_steps(policy.costs, [confidence] * 4)
    return [r for r in range(40) if policy.plan(cap=100).k("m", True, behind=2 + r)]


def test_a_model_that_sat_out_rounds_probes_only_where_the_text_looks_predictable():
    """A probe of a model that sat out rounds first pays to catch up on them. Where the target
    is as unsure of the text as it was when drafts failed, even the hopeful estimate of what
    would stand cannot pay for that, and the declining policy does not probe; where the target
    is sure, it probes on its schedule."""
    costs = declining_model()
    unsure_then_sure(costs, 20, 12, 0.045, 0.2)
    policy = AdaptivePolicy(8, costs)
    assert probes_at(policy, 0.55) == []
    assert probes_at(policy, 0.99)


def drafts_at(costs: CostModel, confidence: float, stood: list[bool],
              verify_s: float = 0.1) -> None:
    """Rounds of model "m", one drafted token each (verified in `verify_s`), begun where the
    target's running confidence was `confidence`: whether each round's token stood."""
    for ok in stood:
        costs.reply.target_conf, costs.reply.target_conf_n = confidence, 4
        costs.observe(Draft(tokens=[1], source="m", uses_passes=True), int(ok), 0.0, verify_s,
                      2)


CONFIDENCES = st.floats(0.0, 1.0)


@given(st.lists(st.tuples(CONFIDENCES, st.booleans()), max_size=60), CONFIDENCES, CONFIDENCES)
def test_the_acceptance_predicted_from_the_target_rises_with_its_confidence(rounds, low, high):
    """Whatever the rounds showed, a draft is predicted to stand no less often where the target
    is surer of the text (hopefully or not): a lower confidence never promises more."""
    low, high = sorted((low, high))
    costs = CostModel()
    for confidence, ok in rounds:
        drafts_at(costs, confidence, [ok])
    for optimistic in (False, True):
        predicted = []
        for confidence in (low, high):
            costs.reply.target_conf, costs.reply.target_conf_n = confidence, 4
            predicted.append(costs.predicted_accept("m", optimistic))
        assert predicted[0] <= predicted[1] + 1e-12


def test_drafts_refused_where_the_target_was_fairly_sure_rule_out_probes_where_it_is_less():
    """The suite's long prose: the 0.5B draft caught up at a running confidence of 0.8 and none
    of its tokens stood; later, at 0.55, where nothing had been drafted yet, the declining
    policy caught up again to probe (and lost again). Refusals at 0.8 now speak for 0.55 as
    well: no probe there, while text the target is sure of is still probed."""
    costs = declining_model()
    drafts_at(costs, 0.85, [False] * 6)
    policy = AdaptivePolicy(8, costs)
    assert probes_at(policy, 0.55) == []
    assert probes_at(policy, 0.99)


def test_one_refusal_at_a_level_seldom_reached_does_not_outweigh_many_that_stood_below_it():
    """Code: twenty drafts stood where the target was 92% sure, one was refused where it was
    all but certain. Fitted by weight, the level below still predicts most drafts stand (a
    cap by the surer level alone would have put it at 0.63 and stopped the catch-ups)."""
    costs = CostModel()
    drafts_at(costs, 0.92, [True] * 20)
    drafts_at(costs, 0.999, [False])
    costs.reply.target_conf = 0.92
    assert costs.predicted_accept("m") > 0.85


def test_a_new_turn_probes_early_whatever_the_schedule_grew_to():
    """Probes that did not pay on prose stretch the schedule to 64 rounds; the next turn (code,
    say) is probed after 4 declined rounds, and as that probe did not pay either, the schedule
    doubles from there (32 rounds)."""
    costs = machine({n: 80 + 60 * (n - 1) for n in range(1, 10)}, accept=0.3)
    policy = AdaptivePolicy(8, costs)

    def probes(rounds: int) -> list[int]:
        return [r for r in range(rounds) if policy.plan(cap=100).k("ngram/8+", False)]

    assert probes(112) == [15, 47, 111]
    policy.start_turn()
    assert probes(40) == [3, 35]


def test_a_model_whose_passes_often_bring_no_draft_stops_paying_for_them():
    """Where the model's first token is seldom worth verifying (prose), most of its passes end
    in no draft: a pass paid for nothing. Priced in, drafting no longer pays and the policy
    declines before the pass; the same costs without the empty rounds still draft."""
    def policy(empty_share: float) -> AdaptivePolicy:
        costs = machine({n: 90 + 40 * (n - 1) for n in range(1, 10)}, source="m", accept=0.7)
        costs.machine.pass_s["m"] = 0.035
        for r in range(60):
            drafted = (r % 10) >= empty_share * 10
            costs.observe(Draft(tokens=[1, 2, 3] if drafted else [], source="m", uses_passes=True,
                                cost=DraftCost(catchup_s=0.035, later_draws=2)),
                          2 if drafted else 0, 0.1, 0.17, 4)
        return AdaptivePolicy(8, costs)

    assert policy(0.0).plan(cap=100).k("m", True, behind=1) > 0
    crowded = policy(0.7).plan(cap=100)
    assert crowded.k("m", True, behind=1) == 0 and crowded.declined


def test_empty_passes_that_come_in_runs_are_priced_after_an_empty_one():
    """Passes that bring no draft come in runs (prose): after an empty pass the next is likely
    empty, after a draft likely not. The same history (half the passes empty, in runs of ten)
    declines after an empty pass and drafts after one that brought a draft."""
    def policy(ends_empty: bool) -> AdaptivePolicy:
        costs = machine({n: 90 + 40 * (n - 1) for n in range(1, 10)}, source="m", accept=0.8)
        costs.machine.pass_s["m"] = 0.035
        for r in range(60):
            drafted = (r // 10) % 2 == (0 if ends_empty else 1)
            if drafted:
                costs.observe(Draft(tokens=[1, 2, 3], source="m", uses_passes=True,
                                    cost=DraftCost(catchup_s=0.035, later_draws=2)),
                              3, 0.105, 0.12, 4)
            else:
                costs.observe(Draft(source="m", uses_passes=True,
                                    cost=DraftCost(catchup_s=0.035)), 0, 0.035,
                              0.09, 1)
        return AdaptivePolicy(8, costs)

    assert policy(ends_empty=False).plan(cap=100).k("m", True, behind=1) > 0
    after_empty = policy(ends_empty=True).plan(cap=100)
    assert after_empty.k("m", True, behind=1) == 0 and after_empty.declined


def test_a_reply_is_code_from_the_fence_that_opens_a_block_to_the_one_that_closes_it():
    """The fence may arrive split over tokens; what counts is the reply's text so far."""
    reply = ["Here is the module:\n", "``", "`python\n", "def f():\n", "    return 1\n", "```",
             "\nIt returns one."]
    kinds = [text_kind("".join(reply[:i])) for i in range(len(reply) + 1)]
    assert kinds == [TEXT, TEXT, TEXT, CODE, CODE, CODE, TEXT, TEXT]


def test_prose_seen_to_lose_is_declined_without_a_probe_while_a_code_block_drafts():
    """The suite's prose and code look alike to the target's running confidence (prose at 0.98
    or more kept 0.39 of the 0.5B draft's tokens, code 0.96). Learned for each kind apart, the
    refusals in prose stop the probes there, and the same confidence in a code block, where
    drafts stood, still drafts at once."""
    costs = declining_model()
    verify_2 = costs.machine.verify_s(2)
    costs.writing(CODE)
    drafts_at(costs, 0.99, [True] * 30, verify_2)
    costs.writing(TEXT)
    for confidence in (0.6, 0.8, 0.9, 0.99):
        drafts_at(costs, confidence, [False] * 6, verify_2)
    policy = AdaptivePolicy(8, costs)
    assert probes_at(policy, 0.99) == []
    costs.writing(CODE)
    assert policy.plan(cap=100).k("m", True, behind=10) > 0


def test_a_pass_widened_by_guesses_is_not_priced_as_a_catch_up():
    """A draft two tokens behind (the round's bonus and the draft token before it) reads them
    in one pass; where that pass also read guessed tokens (engine/guessed_rows.py) its extra
    time is the guesses', and priced as catching up it made every later catch-up look dear
    (half a pass a token: the adaptive policy then stopped drafting on the suite's code)."""
    for widened, priced in ((False, True), (True, False)):
        costs = CostModel()
        costs.machine.pass_s["m"] = 0.010
        draft = Draft(tokens=[1, 2, 3], source="m", uses_passes=True,
                      cost=DraftCost(behind=2, catchup_s=0.015, widened=widened))
        costs.observe(draft, 3, 0.015, 0.040, 4)
        assert ("m" in costs.machine.catchup_token_s) is priced


def test_a_first_catch_up_is_kept_off_the_round_s_own_rate_before_a_pass_was_timed():
    """A reply's first draft reads the 57 tokens it missed in one pass before any pass was
    timed: the rate its round brought, which decides whether the length stays, is the round's
    own (its pass at the prior's price and the verify), not the catch-up's; counted whole, it
    stepped code down at once. What the catch-up costs a token is learned only against a
    pass this machine timed."""
    costs = CostModel()
    costs.observe(Draft(), 0, 0.0, 0.030, 1, [0.9])
    draft = Draft(tokens=[1], source="m", uses_passes=True,
                  cost=DraftCost(behind=57, catchup_s=0.150))
    costs.observe(draft, 1, 0.150, 0.040, 2)
    prior_pass = costs.machine.draft_s("m", 1, True)
    (recent,) = costs.reply.recent.values()
    assert recent.rate == pytest.approx(2 / (prior_pass + 0.040 + (0.150 - prior_pass) / 56))
    assert "m" not in costs.machine.catchup_token_s


def test_a_drafted_token_is_priced_by_the_passes_that_drew_it():
    """Passes after the first that also read guessed tokens drew several draft tokens each:
    the policy learns the seconds a token, not a pass (priced a pass a token, a probe that
    stood whole on code made the next drafts look twice as dear and the adaptive policy
    declined the rest of the reply)."""
    costs = CostModel()
    costs.observe(Draft(tokens=[1, 2, 3], source="m", uses_passes=True,
                        cost=DraftCost(catchup_s=0.010, later_draws=2)), 3, 0.010 + 0.012, 0.050, 4)
    assert costs.machine.pass_s["m"] == pytest.approx(0.006)


def test_after_a_burst_of_other_programs_the_costs_follow_the_step_as_it_is_now():
    """A burst slows every pass alike; once it is over, only plain steps run (the policy
    declines what the burst priced out), and a batch or source not timed since is read at the
    step as it is now, not at the burst's prices, which kept the policy declining for good."""
    costs = CostModel()

    def rounds(n: int, slower: float) -> None:
        for _ in range(n):
            costs.observe(Draft(), 0, 0.0, 0.030 * slower, 1)
            costs.observe(Draft(tokens=[1, 2, 3], q=[1.0] * 3, source="ngram"), 3,
                          0.001 * slower, 0.045 * slower, 4)

    rounds(20, 1.0)
    before = costs.machine.verify_s(4), costs.machine.draft_s("ngram", 3, False)
    rounds(10, 5.0)
    for _ in range(20):
        costs.observe(Draft(), 0, 0.0, 0.030, 1)
    # read at the burst's prices they stay 4.6 times as dear; what is left is the lag of
    # the step's own estimate while the burst began
    assert costs.machine.verify_s(4) < 1.5 * before[0]
    assert costs.machine.draft_s("ngram", 3, False) < 1.5 * before[1]


def test_each_part_of_the_cost_model_lives_as_long_as_it_should():
    """The machine's costs outlive everything; acceptance outlives a conversation, as a prior of
    a few observations (the target-confidence calibration whole); the reply's state ends with
    the reply."""
    from specchat.engine.policy.rates import PRIOR_WEIGHT

    policy = AdaptivePolicy(8)
    costs = policy.costs
    for _ in range(30):
        draft = Draft(tokens=[1, 2, 3], q=[0.9] * 3, source="m", conf=[0.9] * 3, uses_passes=True,
                      cost=DraftCost(behind=2, catchup_s=0.01, later_draws=2))
        costs.observe(draft, 2, 0.03, 0.05, 4, [0.9, 0.8, 0.95])
    machine, bins_at = dict(costs.machine.verify), costs.reply.where("m")
    calibrated = max(rate.n for rate in costs.acceptance.by_target_conf[bins_at])
    assert calibrated > PRIOR_WEIGHT
    assert costs.reply.realized and costs.acceptance.by_position["m"][0].n > PRIOR_WEIGHT
    policy.start_turn()
    assert costs.reply.target_conf is None and not costs.reply.realized
    assert costs.machine.verify == machine and costs.acceptance.by_position["m"][0].n > PRIOR_WEIGHT
    costs.new_conversation()
    assert costs.acceptance.by_position["m"][0].n == PRIOR_WEIGHT
    assert max(rate.n for rate in costs.acceptance.by_target_conf[bins_at]) == calibrated
    assert costs.machine.verify == machine


def test_the_turn_says_where_drafting_stopped_and_went_on_and_why():
    """Rounds that declined after drafting ones stop drafting, a round that drafts after them
    resumes it; the note names the tokens written by then and the last reason given."""
    from specchat.engine.events import RoundEvent
    from specchat.engine.stats import TurnStats

    def round_(i: int, drafted: int, declined: bool = False, why: str = "",
               resumed: str = "") -> RoundEvent:
        return RoundEvent(i, 3, drafted, drafted, 0.0, 0.01, drafted + 1, 0.01 * i,
                          declined=declined, why=why, resumed=resumed)

    stats = TurnStats()
    for r in [round_(0, 0), round_(1, 3), round_(2, 0, True, "slow"), round_(3, 0, True, "slow"),
              round_(4, 2, resumed="a probe"), round_(5, 0, True, "slower"), round_(6, 1)]:
        stats.add_round(r)
    assert stats.turns == [(5, True, "slow"), (7, False, "a probe"), (10, True, "slower"),
                           (11, False, "")]
    assert stats.drafting_note == ("resumed at token 7 (a probe), stopped at token 10, resumed "
                                   "at token 11: slower")
    assert TurnStats().drafting_note == ""
