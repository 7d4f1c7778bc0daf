"""The guarded policy (the default): llama.cpp's k while its rounds beat plain steps on this
machine, a shorter draft or none where they do not, saying why; probes that bring it back."""

from __future__ import annotations

import re
from collections.abc import Callable

from support.costs import STEP, M, drafted, k_of, warm

from specchat.engine.policy import CostModel, GuardedPolicy
from specchat.engine.policy.base import Seen
from specchat.engine.policy.guarded import STOOD_WINDOWS
from specchat.engine.policy.rates import RECENT_ROUNDS
from specchat.engine.policy.reply import SURE_AT, SURE_RUN, ReplyState
from specchat.engine.policy.schedule import PROBE_EVERY, PROBE_FIRST, PROBE_WHY
from specchat.engine.text_kind import CODE, TEXT
from specchat.engine.types import Draft, DraftCost


def test_it_drafts_k_while_its_rounds_beat_plain_steps():
    costs = warm()
    policy = GuardedPolicy(3, costs=costs)
    for _ in range(20):
        k, plan = k_of(policy)
        assert k == 3 and not plan.declined
        drafted(costs, 3, 3, 0.080)  # 4 tokens in 80 ms: 50 tok/s against 25


def test_a_length_that_loses_steps_down_to_one_then_none_and_says_why():
    costs = warm()
    policy = GuardedPolicy(3, costs=costs)
    ks = []
    for _ in range(6):
        k, plan = k_of(policy)
        ks.append(k)
        if k:
            drafted(costs, k, 0, 0.080)  # 1 token in 80 ms: 12.5 tok/s against 25
    assert ks == [3, 3, 1, 1, 0, 0]
    assert plan.declined
    match = re.fullmatch(r"1-token drafts brought ([\d.]+) tok/s, plain steps ([\d.]+)", plan.why)
    assert match and float(match[1]) < float(match[2]) == 25.0


def test_a_probe_comes_on_the_schedule_at_one_token_and_a_probe_that_pays_brings_k_back():
    """A scheduled probe drafts 1 token (at k, a probe in prose lost two k-token rounds each
    time); one that loses stops again, one whose tokens all stand brings k back."""
    costs = warm()
    policy = GuardedPolicy(3, costs=costs)
    for k in (3, 3, 1, 1):
        assert k_of(policy)[0] == k
        drafted(costs, k, 0, 0.080)
    declined = 0
    while (k := k_of(policy)[0]) == 0:
        declined += 1
    assert k == 1 and declined == PROBE_EVERY - 1  # within the reply: on the schedule
    ks = [k]
    while ks[-1]:  # the probe lost too
        drafted(costs, ks[-1], 0, 0.080)
        ks.append(k_of(policy)[0])
    assert ks == [1, 1, 0]
    policy.start_turn()
    costs.observe(Draft(), 0, 0.0, STEP, 1, [0.9, 0.9, 0.9])
    declined = 0
    while (k := k_of(policy)[0]) == 0:
        declined += 1
    assert k == 1 and declined == PROBE_FIRST - 1  # a new reply probes early: the 4th round
    ks = [k]
    while len(ks) < 40 and ks[-1] != 3:  # the text turned predictable: the tokens stand
        drafted(costs, ks[-1], ks[-1], 0.040 + 0.010 * ks[-1])
        ks.append(k_of(policy)[0])
    assert ks[-1] == 3 and set(ks[:-1]) == {1}
    for _ in range(10):  # and k stays
        drafted(costs, 3, 3, 0.070)
        assert k_of(policy)[0] == 3


def test_a_code_block_drafts_at_once_where_prose_stopped_drafting():
    costs = warm()
    policy = GuardedPolicy(3, costs=costs)
    costs.writing(TEXT)
    for k in (3, 3, 1, 1):
        assert k_of(policy)[0] == k
        drafted(costs, k, 0, 0.080)
    assert k_of(policy)[0] == 0
    costs.writing(CODE)
    assert k_of(policy)[0] == 3


def test_a_target_grown_sure_of_the_text_brings_a_probe_at_once():
    costs = warm()
    policy = GuardedPolicy(3, costs=costs)
    costs.observe(Draft(), 0, 0.0, STEP, 1, [0.5] * 10)  # unsure where drafting stops
    for k in (3, 3, 1, 1):
        assert k_of(policy)[0] == k
        drafted(costs, k, 0, 0.080)
    assert k_of(policy)[0] == 0
    costs.observe(Draft(), 0, 0.0, STEP, 1, [0.99] * 10)
    assert k_of(policy)[0] == 3


def test_where_even_drafts_that_always_stood_lose_it_never_drafts_nor_probes():
    """A draft pass as dear as a target step and a verify batch as dear as its tokens' steps:
    no draft can beat a plain step, so no round drafts, and each says so."""
    costs = warm(pass_s=STEP, verify_slope=1.0)
    policy = GuardedPolicy(3, costs=costs)
    plans = [k_of(policy) for _ in range(300)]
    assert all(k == 0 and plan.declined for k, plan in plans)
    assert plans[0][1].why.startswith("drafts that always stood would bring")


def test_a_draft_that_must_catch_up_does_so_only_where_the_text_looks_predictable():
    """30 tokens to read first (about 75 ms at a quarter of a pass a token): in a code block,
    where the target is unsure of the text the catch-up would not be earned back, where it is
    sure it would. In prose whose drafts were never tested, the target's sureness is not
    taken at its word (PROSE_UNTRIED) until it has stayed sure for `SURE_RUN` positions (a
    list); once drafts were tested there, it is."""
    for kind, conf, positions, drafts in ((CODE, 0.2, 10, False), (CODE, 0.999, 10, True),
                                          (TEXT, 0.999, SURE_RUN - 1, False),
                                          (TEXT, 0.999, SURE_RUN, True)):
        costs = warm()
        costs.writing(kind)
        costs.machine.learn_catchup(M, 0.0025)
        sure = costs.reply.sure_run  # warm() saw the target sure of its first tokens
        costs.observe(Draft(), 0, 0.0, STEP, 1, [conf] * (positions - sure))
        k, plan = k_of(GuardedPolicy(3, costs=costs), behind=30)
        assert (k == 3) == drafts and plan.declined != drafts, (kind, conf, positions)
        assert drafts or "catch-up" in plan.why
    costs = warm()
    costs.machine.learn_catchup(M, 0.0025)
    for _ in range(5):  # drafts tested in prose where the target was sure, and they stood
        costs.observe(Draft(tokens=[0], q=[1.0], source=M), 1, 0.01, 0.04, 2, [0.999] * 2)
    costs.observe(Draft(), 0, 0.0, STEP, 1, [0.5])  # sure no longer: tested drafts decide
    costs.observe(Draft(), 0, 0.0, STEP, 1, [0.999] * 3)
    k, plan = k_of(GuardedPolicy(3, costs=costs), behind=30)
    assert k == 3, plan.why


def test_a_list_catches_the_draft_up_over_the_rest_of_the_reply():
    """Text the target stayed sure of runs on, as code does: a catch-up of 400 tokens (about
    1 s) that the next 32 tokens would not earn back is taken where the rest of the reply
    earns it back, and not where the reply is about to end. Priced over the next tokens alone,
    a list's catch-up grew with every round it sat out and was never taken."""
    for left, drafts in ((900, True), (40, False)):
        costs = warm()
        costs.writing(TEXT)
        costs.machine.learn_catchup(M, 0.0025)
        sure = costs.reply.sure_run  # warm() saw the target sure of its first tokens
        costs.observe(Draft(), 0, 0.0, STEP, 1, [0.999] * (SURE_RUN - sure))
        assert costs.reply.stayed_sure
        plan = GuardedPolicy(3, costs=costs).plan(cap=left)
        assert (plan.k(M, True, 400) == 3) == drafts, (left, plan.why)
        assert drafts or "catch-up" in plan.why


def test_the_target_stays_sure_only_over_positions_in_a_row():
    """A run of sure positions broken by an unsure one starts again, from where the running
    confidence is back at `SURE_AT`."""
    reply = ReplyState()
    reply.move_confidence([0.999] * (SURE_RUN - 1))
    assert not reply.stayed_sure
    reply.move_confidence([0.0])
    assert reply.sure_run == 0
    sure = 0
    for _ in range(4 * SURE_RUN):
        reply.move_confidence([0.999])
        sure += reply.target_conf is not None and reply.target_conf >= SURE_AT
        if reply.stayed_sure:
            break
    assert reply.stayed_sure and sure == SURE_RUN


def test_a_short_draft_whose_rounds_all_stood_tries_k_again():
    """3-token drafts that fell at their first token, then 1-token drafts that all stand:
    once their first tokens stood often enough that k tokens would bring more than the short
    drafts do (each standing as often as the source's tokens at its place), k comes back."""
    costs = warm()
    policy = GuardedPolicy(3, costs=costs)
    for k in (3, 3):
        assert k_of(policy)[0] == k
        drafted(costs, k, 0, 0.080)
    ks: list[int] = []
    while len(ks) < 40 and 3 not in ks:
        ks.append(k_of(policy)[0])
        draft = Draft(tokens=[0], q=[1.0], source=M, uses_passes=True,
                      cost=DraftCost(behind=1, catchup_s=0.010))
        costs.observe(draft, 1, 0.010, 0.044, 2, [0.9, 0.9])  # 2 tokens in 54 ms, every draft stood
    assert ks[-1] == 3 and set(ks[:-1]) == {1} and len(ks) > 5


def test_in_a_code_block_a_catch_up_drafts_the_length_that_earns_it_back():
    """A verify batch of 4 at 2.19 plain steps and of 2 at 1.25, a pass at 0.43 of a step (a
    2-core AVX-512 machine's costs), an 84 ms catch-up, the reply ending within 40 tokens:
    3-token drafts would not earn the catch-up back, 1-token drafts would, and in a code block
    the catch-up's round drafts 1; in prose, where the target's confidence promises more than
    the draft keeps (and the target has not stayed sure long), it is priced at k and declined."""
    for kind, k in ((CODE, 1), (TEXT, 0)):
        costs = CostModel()
        costs.writing(kind)
        costs.observe(Draft(), 0, 0.0, STEP, 1, [0.999] * (SURE_RUN - 1))
        for n, steps in ((2, 1.25), (4, 2.19)):
            costs.observe(Draft(tokens=[0] * (n - 1)), 0, 0.0, STEP * steps, n)
        costs.machine.learn_pass(M, 0.43 * STEP)
        costs.machine.learn_catchup(M, 0.003)
        plan = GuardedPolicy(3, costs=costs).plan(cap=40)
        assert plan.k(M, True, 30) == k and plan.declined == (not k), plan.why


def test_inside_a_code_block_a_catch_up_is_earned_back_over_the_rest_of_the_reply():
    """A catch-up of 0.6 s, drafts expected at about 46 tok/s against 25: not earned back
    within the next 32 tokens of prose (drafts tested there, the target sure again for fewer
    than `SURE_RUN` positions), earned back within the 100 the reply may still write in a
    code block, where replies run long."""
    for kind, drafts in ((TEXT, False), (CODE, True)):
        costs = warm()
        costs.machine.learn_catchup(M, 0.6 / 28)
        costs.writing(kind)
        for _ in range(5):  # drafts tested where the target was sure, and they stood
            costs.observe(Draft(tokens=[0], q=[1.0], source=M), 1, 0.01, 0.04, 2, [0.999] * 2)
        costs.observe(Draft(), 0, 0.0, STEP, 1, [0.5])
        costs.observe(Draft(), 0, 0.0, STEP, 1, [0.999] * 5)
        assert not costs.reply.stayed_sure
        k, plan = k_of(GuardedPolicy(3, costs=costs), behind=30)
        assert (k == 3) == drafts, plan.why


def test_a_run_of_short_replies_still_probes():
    """Replies of three rounds each, drafting stopped: the rounds declined in earlier replies
    count towards the next probe, so one comes within a few replies."""
    costs = warm()
    policy = GuardedPolicy(3, costs=costs)
    for k in (3, 3, 1, 1):
        assert k_of(policy)[0] == k
        drafted(costs, k, 0, 0.080)
    assert k_of(policy)[0] == 0
    ks = []
    for _ in range(4):
        policy.start_turn()
        ks += [k_of(policy)[0] for _ in range(3)]
    assert any(ks)


def test_rounds_that_beat_plain_steps_overrule_a_cost_model_that_says_no_draft_can():
    """The cost model priced drafts out of reach (a pass as dear as a step, a steep verify
    curve) while the length's own rounds brought 50 tok/s against 25: it drafts on."""
    costs = warm(pass_s=STEP, verify_slope=1.0)
    policy = GuardedPolicy(3, costs=costs)
    for _ in range(2):
        drafted(costs, 3, 3, 0.080)
    for _ in range(5):
        assert k_of(policy)[0] == 3
        drafted(costs, 3, 3, 0.080)


def sat_out(policy: GuardedPolicy, conf: float = 0.9) -> int:
    """A round planned and run through the policy: declined, a plain step at `conf`; or its
    draft length where it drafts (the round not run)."""
    k, plan = k_of(policy)
    if not k:
        policy.observe(Draft(), Seen(0, None, 0.0, STEP, 1, [conf] * 10))
    return k


def stopped(conf: float = 0.9) -> GuardedPolicy:
    """A policy whose drafts lost until it stopped drafting, one round declined since."""
    costs = warm()
    policy = GuardedPolicy(3, costs=costs)
    costs.observe(Draft(), 0, 0.0, STEP, 1, [conf] * 10)
    for k in (3, 3, 1, 1):
        assert k_of(policy)[0] == k
        drafted(costs, k, 0, 0.080)
    assert sat_out(policy, conf) == 0
    return policy


def test_a_round_that_drafts_again_after_declined_ones_says_why():
    """A scheduled probe, a target grown sure of the text, a code block, a catch-up that now
    looks worth it: each named on the round that drafts again; a round after drafting ones
    names nothing."""
    policy = stopped()
    while sat_out(policy) == 0:
        pass
    assert policy._now is not None and policy._now.resumed == PROBE_WHY

    policy = stopped(conf=0.5)
    policy.costs.observe(Draft(), 0, 0.0, STEP, 1, [0.99] * 10)
    k, plan = k_of(policy)
    assert k == 3 and plan.resumed.startswith("the target grew sure of the text")

    policy = stopped()
    policy.costs.writing(CODE)
    k, plan = k_of(policy)
    assert k == 3 and plan.resumed == "the reply turned to code, whose drafts are priced apart"

    costs = warm()
    costs.writing(CODE)
    costs.machine.learn_catchup(M, 0.0025)
    policy = GuardedPolicy(3, costs=costs)
    costs.observe(Draft(), 0, 0.0, STEP, 1, [0.2] * 10)
    assert k_of(policy, behind=30)[0] == 0
    policy.observe(Draft(), Seen(0, None, 0.0, STEP, 1, [0.999] * 10))
    k, plan = k_of(policy, behind=31)
    assert k == 3 and plan.resumed.startswith("the text looked predictable enough to catch")
    policy.observe(Draft(tokens=[0, 1, 2], source=M), Seen(3, None, 0.04, 0.04, 4, [0.9] * 4))
    k, plan = k_of(policy)
    assert k == 3 and plan.resumed == ""


def _stepped_down_on_prose() -> tuple[GuardedPolicy, Callable[[int, int, float], None]]:
    """A policy whose 3-token drafts had their first token stand and the second fall (prose)
    until it stepped down to 1; and how to feed it a round."""
    costs = warm()
    policy = GuardedPolicy(3, costs=costs)

    def drafted_here(k: int, stood: int, seconds: float) -> None:
        draft = Draft(tokens=list(range(k)), q=[1.0] * k, source=M, uses_passes=True,
                      cost=DraftCost(behind=1, catchup_s=seconds / 2))
        policy.observe(draft, Seen(stood, None, seconds / 2, seconds / 2, k + 1, [0.9] * (stood + 1)))

    for k in (3, 3):
        assert k_of(policy)[0] == k
        drafted_here(k, 1, 0.1)  # 2 tokens in 100 ms: 20 tok/s against 25
    return policy, drafted_here


def test_short_drafts_that_all_stood_stay_short_where_k_tokens_would_not_bring_more():
    """After stepping down on prose, 1-token drafts that all stand do not bring k back at once,
    since the places past the first have not stood (without that, k came back after every 4
    rounds and lost 2); after `STOOD_WINDOWS` windows of them in a row, k is tried again,
    since those places learn nothing while only the first token is drafted (two unlucky
    rounds where a code block opened kept k away for the rest of a reply)."""
    policy, drafted_here = _stepped_down_on_prose()
    ks = []
    for _ in range(STOOD_WINDOWS * RECENT_ROUNDS + 1):
        ks.append(k_of(policy)[0])
        drafted_here(ks[-1], ks[-1], 0.050)  # 2 tokens in 50 ms: 40 tok/s, every draft stood
    assert ks == [1] * STOOD_WINDOWS * RECENT_ROUNDS + [3]


def test_a_short_draft_that_fell_starts_the_count_of_rounds_in_a_row_again():
    policy, drafted_here = _stepped_down_on_prose()
    fell = RECENT_ROUNDS + 1
    ks = []
    while len(ks) < 40 and 3 not in ks:
        ks.append(k_of(policy)[0])
        drafted_here(ks[-1], 0 if len(ks) - 1 == fell else ks[-1], 0.050)
    # windows are counted whole: the count starts again at the window after the fall's
    assert len(ks) - 1 == (fell // RECENT_ROUNDS + 1 + STOOD_WINDOWS) * RECENT_ROUNDS


def test_one_refused_token_after_a_judged_window_does_not_stop_short_drafts_that_pay():
    """The decision reads the last `RECENT_ROUNDS` rounds across the windows counted for k:
    a window cleared when judged left it two rounds, and one refused token among them stopped
    1-token drafts in a code reply whose drafts paid."""
    policy, drafted_here = _stepped_down_on_prose()
    for _ in range(RECENT_ROUNDS):  # a window, all standing: 2 tokens in 65 ms, 30.8 tok/s
        assert k_of(policy)[0] == 1
        drafted_here(1, 1, 0.065)
    for stood in (0, 1):  # one refused, one stood: the last 4 rounds brought 7 tokens in
        assert k_of(policy)[0] == 1  # 260 ms, 26.9 tok/s against 25 (these 2, 23.1)
        drafted_here(1, stood, 0.065)
    assert k_of(policy)[0] == 1


def test_in_a_code_block_a_length_is_judged_on_more_rounds_than_in_prose():
    """Two rounds with refused tokens step prose down to 1 token; in a code block, where
    drafts mostly stand, the length is judged on `RECENT_ROUNDS` rounds."""
    ks = {}
    for kind in (TEXT, CODE):
        costs = warm()
        policy = GuardedPolicy(3, costs=costs)
        costs.writing(kind)
        ks[kind] = []
        for stood in (1, 1, 3, 3):  # 2 tokens in 100 ms, twice; then 4 tokens in 70 ms
            ks[kind].append(k_of(policy)[0])
            drafted(costs, ks[kind][-1], min(stood, ks[kind][-1]), 0.100 if stood == 1 else 0.070)
        ks[kind].append(k_of(policy)[0])
    assert ks[TEXT] == [3, 3, 1, 1, 1]
    assert ks[CODE] == [3, 3, 3, 3, 3]  # 12 tokens in 340 ms: 35 tok/s against 25


def test_drafting_stopped_by_its_own_rounds_does_not_probe_at_once():
    """Rounds declined at the reply's start (the draft not worth catching up yet), then
    drafting that lost until it stopped: those declined rounds do not make a probe due, which
    would only repeat the rounds that just lost (a short prose reply in `ask` did)."""
    costs = warm()
    costs.machine.learn_catchup(M, 0.0025)
    policy = GuardedPolicy(3, costs=costs)
    policy.start_turn()
    costs.observe(Draft(), 0, 0.0, STEP, 1, [0.2] * 10)
    for _ in range(PROBE_FIRST):  # unsure of the text: not worth catching the draft up
        assert k_of(policy, behind=30)[0] == 0
        costs.observe(Draft(), 0, 0.0, STEP, 1, [0.2])
    costs.observe(Draft(), 0, 0.0, STEP, 1, [0.999] * 10)  # sure now: it catches up and drafts
    ks = []
    for _ in range(10):
        k = k_of(policy)[0]
        ks.append(k)
        if k:
            drafted(costs, k, 0, 0.080)
    assert ks[:4] == [3, 3, 1, 1] and set(ks[4:]) == {0}
