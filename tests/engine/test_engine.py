"""The speculation loop on tiny real GGUF models through the real llama.cpp runtime."""

from __future__ import annotations

import codecs
import statistics
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from support.checks import (
    GREEDY_CASES,
    PADDING_SHAPE,
    SAMPLING,
    check_greedy_rule,
    check_sampling_rule,
    make_drafter,
    wrong_rule,
)
from support.models import GREEDY, load, prompt_ids, run
from support.plans import PassesFor

from specchat.engine.baseline import BASELINE_EVERY, Baseline, ReplyClock
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import RoundEvent, TokenEvent, TokenKind, TurnEvent, turn_of
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.model_drafter import ModelDrafter
from specchat.engine.ngram_drafter import NgramDrafter
from specchat.engine.policy import FixedPolicy, PolicyKind
from specchat.engine.policy.reply import TARGET_CONF_EMA
from specchat.engine.sampling import SamplingParams
from specchat.errors import ContextOverflowError

# -- greedy: exact on the logits it computed, equal to target-only up to a near-tie -----------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**GREEDY_CASES)
def test_greedy_matches_target_only_up_to_a_near_tie(models, near_tie, text, k, drafter, policy):
    target, draft = models
    check_greedy_rule(target, make_drafter(drafter, draft), prompt_ids(target, text), k, policy,
                      near_tie)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**GREEDY_CASES)
def test_a_hot_vocabulary_draft_changes_no_greedy_token(models, hot_draft, near_tie, text, k,
                                                        drafter, policy):
    """A draft that cannot propose half the vocabulary (FR-Spec) drafts less well, never
    differently for the user."""
    target, _ = models
    check_greedy_rule(target, make_drafter(drafter, hot_draft), prompt_ids(target, text), k,
                      policy, near_tie)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**GREEDY_CASES)
def test_padded_verify_batches_change_no_token(models, near_tie, text, k, drafter, policy):
    target, draft = models
    check_greedy_rule(target, make_drafter(drafter, draft), prompt_ids(target, text), k, policy,
                      near_tie, padded=True)


def test_a_padded_batch_leaves_no_cache_entry_and_its_rows_are_dropped(models):
    """Where 4 tokens verify cheaper than 3 (the known curve), a 2-token draft is verified in a
    batch of 4: the padding's rows never reach the verdicts, and after every round both caches
    hold committed tokens only, as after a rejection."""
    target, draft = models
    ids = prompt_ids(target, "pad the batch")
    engine = SpeculativeEngine(target, make_drafter("model", draft), GREEDY, DraftSettings(k=2))
    engine.policy.costs.machine.shape = PADDING_SHAPE
    batches: list[int] = []
    original = target._inner.eval

    def counting(tokens, logits_from):
        batches.append(len(tokens))
        return original(tokens, logits_from)

    target._inner.eval = counting
    committed = list(ids)
    try:
        for event in engine.generate(ids, GenerationSettings(max_tokens=30)):
            if isinstance(event, TokenEvent) and event.kind is not TokenKind.REJECTED:
                committed.append(event.id)
            elif isinstance(event, RoundEvent):
                assert_caches_hold(committed, target, draft)
                if event.round > 0 and event.drafted == 2:
                    assert batches[-1] == 4, "a 3-token verify is padded to the cheaper 4"
                if event.round > 0 and event.drafted == 0:
                    assert batches[-1] == 1, "a plain step is never padded"
    finally:
        del target._inner.eval
    assert 4 in batches and 3 not in batches[1:]


def test_verdicts_partition_the_draft(models):
    target, draft = models
    ids = prompt_ids(target, "the quick brown fox")
    engine = SpeculativeEngine(target, make_drafter("model", draft), GREEDY, DraftSettings(k=4))
    events, turn = run(engine, ids, max_tokens=40)
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert sum(r.drafted for r in rounds) == turn.counts.n_drafted > 0
    assert sum(r.accepted for r in rounds) == turn.counts.n_accepted
    kept = [e for e in tokens if e.kind is not TokenKind.REJECTED]
    assert [e.id for e in kept] == turn.token_ids
    assert [e.position for e in kept] == list(range(turn.counts.n_tokens))
    assert "".join(e.text for e in kept) == turn.text
    assert tokens[0].kind is TokenKind.TARGET
    for r in rounds[1:]:
        in_round = [e for e in tokens if e.round == r.round]
        kinds = [e.kind for e in in_round]
        assert kinds.count(TokenKind.ACCEPTED) == r.accepted
        if r.accepted < r.drafted:
            assert kinds.count(TokenKind.REJECTED) == r.drafted - r.accepted
            assert kinds[-1] is TokenKind.CORRECTED
        elif turn.stop_reason != "max_tokens" or r is not rounds[-1]:
            assert kinds[-1] is TokenKind.BONUS
    assert turn.counts.target_passes == len(rounds)
    assert 0 < turn.counts.acceptance_rate <= 1
    assert len(turn.counts.accepted_by_position) <= 4


def test_each_round_reports_the_targets_running_confidence_before_it(models):
    """The adaptive policy reads how predictable the text is from the target's top probability
    at each committed position (free: every round computes those rows). Greedy, a committed
    token is the target's top choice, so its verdict's p is that probability: each round's
    `target_conf` is the running average of the p of every token committed before it."""
    target, draft = models
    engine = SpeculativeEngine(target, make_drafter("ngram", draft), GREEDY, DraftSettings(k=4))
    events, turn = run(engine, prompt_ids(target, "ab ab ab ac ab ab"), max_tokens=60)
    expected: list[float | None] = []
    running, pending = None, []
    for e in events:
        if isinstance(e, RoundEvent):
            expected.append(running)
            for p in pending:
                running = p if running is None else running + TARGET_CONF_EMA * (p - running)
            pending = []
        elif isinstance(e, TokenEvent) and e.kind is not TokenKind.REJECTED:
            pending.append(e.p)
    reported = [e.target_conf for e in events if isinstance(e, RoundEvent)]
    assert reported[0] is None and expected[0] is None
    assert 0 < turn.counts.n_accepted < turn.counts.n_drafted  # rows after a refusal must not count
    assert reported[1:] == pytest.approx(expected[1:])


# -- sampling follows the target's distribution ------------------------------------------------


@pytest.mark.parametrize("layout", ["F32 draft", "Q4_0 draft", "hot-vocabulary draft"])
@pytest.mark.parametrize("rule", ["p/q rule", "wrong rule"])
def test_speculative_sampling_follows_the_target_distribution(models, q4_0_draft, hot_draft,
                                                              monkeypatch, rule, layout):
    """The second token comes from a speculative round (draft model, k=2); the pair
    distribution must be the target's, whatever the draft's layout, and when the draft gives
    half the vocabulary no probability at all. Replacing the rule by a subtly wrong one must
    fail."""
    target, draft = models
    draft = {"Q4_0 draft": q4_0_draft, "hot-vocabulary draft": hot_draft}.get(layout, draft)
    ids = prompt_ids(target, "sampling")
    if rule == "wrong rule":
        monkeypatch.setattr("specchat.engine.verify.verify_sampling", wrong_rule)
    rng = np.random.default_rng(7)
    engine = SpeculativeEngine(target, ModelDrafter(draft, SAMPLING, rng), SAMPLING,
                               DraftSettings(k=2), rng)
    check_sampling_rule(engine, target, ids, exact=rule == "p/q rule")


# -- draft length controls --------------------------------------------------------------------
def test_confidence_stop_drafts_only_tokens_above_p_min(models):
    target, draft = models
    ids = prompt_ids(target, "confidence")
    free = SpeculativeEngine(target, make_drafter("model", draft), GREEDY, DraftSettings(k=6))
    _, loose = run(free, ids, max_tokens=40)
    drafter = ModelDrafter(draft, GREEDY, np.random.default_rng(0))
    events, strict = run(SpeculativeEngine(target, drafter, GREEDY, DraftSettings(k=6, p_min=0.9)),
                         ids, max_tokens=40)
    drafted = [e for e in events if isinstance(e, TokenEvent) and e.q is not None]
    assert drafted and all(e.q >= 0.9 for e in drafted)
    assert strict.counts.n_drafted < loose.counts.n_drafted


def test_a_model_drafter_runs_no_pass_for_a_token_the_plan_would_not_keep(models):
    """Each pass of a model drafter proposes the next token; one whose token could not be kept
    is not run (a third of a target step for the 0.5B draft on 2 cores)."""
    target, draft = models
    drafter = ModelDrafter(draft, GREEDY, np.random.default_rng(0))
    ids = prompt_ids(target, "passes")
    drafter.release([])
    before = drafter.passes
    proposed = drafter.propose(ids, PassesFor(k=6, worth=2))
    assert len(proposed.tokens) == 2 and drafter.passes - before == 2  # catch-up pass, one more
    drafter.release(ids)
    assert len(drafter.propose(ids, PassesFor(k=6, worth=6)).tokens) == 6


def test_a_draft_that_has_not_read_the_prompt_reports_its_catch_up_once(models):
    """A model drafter reads the prompt in its first round (the catch-up the adaptive policy
    prices and a slower reply is explained by); in step after that, behind by the round's
    correction or bonus only, it catches up on nothing more. The turn sums what rounds say."""
    target, draft = models
    engine = SpeculativeEngine(target, make_drafter("model", draft), GREEDY, DraftSettings(k=3))
    engine.clear_caches()
    ids = prompt_ids(target, "a prompt the draft has not read yet")
    events, turn = run(engine, ids, max_tokens=16)
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    # round 0 is the target's first token; round 1 reads the prompt and that token, less the
    # one or two tokens any round reads
    assert rounds[1].catchup_tokens == len(ids) - 1 and rounds[1].catchup_s > 0
    assert all(r.catchup_tokens == 0 and r.catchup_s == 0 for r in rounds[:1] + rounds[2:])
    assert (turn.counts.catchup_tokens, turn.counts.catchup_s) == (len(ids) - 1, rounds[1].catchup_s)


def test_drafts_shorter_than_n_min_are_dropped(models):
    target, draft = models
    engine = SpeculativeEngine(target, make_drafter("model", draft), GREEDY,
                               DraftSettings(k=3, n_min=4))
    _, turn = run(engine, prompt_ids(target, "n min"), max_tokens=12)
    assert turn.counts.n_drafted == 0 and turn.counts.target_passes == turn.counts.rounds


# -- caches hold exactly the accepted tokens ---------------------------------------------------
def assert_caches_hold(committed: list[int], target, draft) -> None:
    assert target.tokens == committed[: len(target.tokens)]
    assert len(target.tokens) >= len(committed) - 1
    assert draft.tokens == committed[: len(draft.tokens)]


def test_caches_hold_accepted_tokens_after_each_round_and_after_cancel(models):
    target, draft = models
    ids = prompt_ids(target, "cache check")
    engine = SpeculativeEngine(target, make_drafter("model", draft), GREEDY, DraftSettings(k=5))
    cancel = threading.Event()
    committed = list(ids)
    rounds = 0
    turn = None
    for event in engine.generate(ids, GenerationSettings(max_tokens=200), cancel):
        if isinstance(event, TokenEvent) and event.kind is not TokenKind.REJECTED:
            committed.append(event.id)
        elif isinstance(event, RoundEvent):
            rounds += 1
            assert_caches_hold(committed, target, draft)
            if rounds == 4:
                cancel.set()
        elif isinstance(event, TurnEvent):
            turn = event
    assert turn is not None and turn.stop_reason == "cancelled"
    assert turn.token_ids == committed[len(ids):]
    assert_caches_hold(committed, target, draft)
    # the next turn works and evaluates only its new tokens
    follow = committed + prompt_ids(target, " more")
    passes_before = list(target.tokens)
    _, turn2 = run(engine, follow, max_tokens=8)
    assert turn2.counts.n_tokens == 8
    assert target.tokens[: len(passes_before)] == passes_before


def test_next_turn_evaluates_only_new_tokens(models):
    target, _ = models
    engine = SpeculativeEngine(target, NoDrafter(), GREEDY)
    ids = prompt_ids(target, "a long enough first prompt for the cache")
    _, first = run(engine, ids, max_tokens=10)
    history = ids + first.token_ids
    evaluated: list[int] = []
    original = target._inner.eval

    def counting(tokens, logits_from):
        evaluated.extend(tokens)
        return original(tokens, logits_from)

    target._inner.eval = counting
    try:
        new = prompt_ids(target, " next")
        _, second = run(engine, history + new, max_tokens=5)
    finally:
        del target._inner.eval
    # the first pass of the second turn evaluated the new tokens plus at most the last reply token
    assert len(evaluated) - (second.counts.n_tokens - 1) <= len(new) + 1


# -- n-gram drafter ---------------------------------------------------------------------------
def test_ngram_proposes_continuation_of_latest_earlier_match():
    drafter, k3 = NgramDrafter(2), FixedPolicy(3)
    seq = [1, 2, 3, 4, 9, 1, 2, 5, 6, 7, 1, 2]
    draft = drafter.propose(seq, k3.plan(8))
    assert draft.tokens == [5, 6, 7]  # latest earlier occurrence of [1, 2] is at index 5
    assert draft.source == "ngram/2"
    assert NgramDrafter(2, 9).source(9) == "ngram/8+" and NgramDrafter(2, 9).source(5) == "ngram/4+"
    assert drafter.propose(seq + [8], k3.plan(8)).tokens == []
    # a new conversation resets the index
    assert drafter.propose([4, 4, 1, 2, 3], k3.plan(8)).tokens == []


def test_ngram_prefers_the_longest_match_and_names_its_length():
    drafter, k2 = NgramDrafter(2, 4), FixedPolicy(2)
    seq = [7, 1, 2, 3, 4, 5, 1, 2, 8, 9, 0, 7, 1, 2]
    draft = drafter.propose(seq, k2.plan(8))
    assert (draft.tokens, draft.source) == ([3, 4], "ngram/2")  # [7, 1, 2] beats the later [1, 2]
    assert drafter.propose(seq, FixedPolicy(5).plan(1)).tokens == [3]  # the plan's cap holds


# -- stops -------------------------------------------------------------------------------------
def test_reply_never_ends_inside_a_multibyte_character(models):
    target, _ = models
    engine = SpeculativeEngine(target, NoDrafter(), SamplingParams(temperature=1.5, seed=3))
    extended = 0
    for seed in range(20):
        engine.rng = np.random.default_rng(seed)
        _, turn = run(engine, prompt_ids(target, "ünïcödé ✓ "), max_tokens=7)
        raw = b"".join(target.token_bytes(t) for t in turn.token_ids)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        assert turn.text == decoder.decode(raw)
        assert decoder.getstate()[0] == b"", "the reply ends inside a UTF-8 character"
        extended += turn.counts.n_tokens > 7
    assert extended, "no reply reached max_tokens inside a character: the test proves nothing"


def test_stop_string_ends_the_reply_before_it(models):
    target, _ = models
    engine = SpeculativeEngine(target, NoDrafter(), GREEDY)
    ids = prompt_ids(target, "stop here")
    _, full = run(engine, ids, max_tokens=30)
    stop = full.text[10:12]
    _, cut = run(engine, ids, max_tokens=30, stop=[stop])
    assert cut.stop_reason == "stop_string"
    assert cut.text == full.text[: full.text.find(stop)]


def test_prompt_longer_than_context_is_a_clear_error(tiny):
    small = load(tiny.target, n_ctx=256)
    engine = SpeculativeEngine(small, NoDrafter(), GREEDY)
    with pytest.raises(ContextOverflowError, match=f"context holds {small.n_ctx}"):
        list(engine.generate([65] * (small.n_ctx + 5)))
    assert small.tokens == []
    small.close()


def test_generation_stops_when_the_context_is_full(tiny):
    small = load(tiny.target, n_ctx=256)
    engine = SpeculativeEngine(small, NgramDrafter(1), GREEDY, DraftSettings(k=4))
    prompt = [65 + i % 20 for i in range(small.n_ctx - 30)]
    _, turn = run(engine, prompt, max_tokens=100)
    assert turn.stop_reason == "context_full"
    assert len(prompt) + turn.counts.n_tokens == small.n_ctx + 1  # the last token needs no evaluation
    small.close()


def test_a_model_that_cannot_drop_part_of_its_cache_is_named_in_a_clear_error(tiny):
    from specchat.errors import CacheTruncationError

    mamba = load(tiny.recurrent)
    assert not mamba.can_truncate
    mamba.eval([65, 66, 67, 68], 3)
    with pytest.raises(CacheTruncationError, match="tiny-mamba: this model's memory cannot drop"):
        mamba.truncate(2)
    assert mamba.tokens == [65, 66, 67, 68]  # the mirror still tells the truth
    mamba.close()


def test_time_the_consumer_takes_is_not_counted_against_the_engine(models):
    """A consumer that pauses after every round (step-through mode) must not lower the rates."""
    import time

    target, _ = models
    engine = SpeculativeEngine(target, NoDrafter(), GREEDY)
    pauses = 0.0
    turn = None
    t0 = time.perf_counter()
    for event in engine.generate(prompt_ids(target, "pause"), GenerationSettings(max_tokens=12)):
        if isinstance(event, RoundEvent):
            t_pause = time.perf_counter()
            time.sleep(0.05)
            pauses += time.perf_counter() - t_pause
        turn = event
    elapsed = time.perf_counter() - t0
    assert pauses >= 0.5
    # the engine's own time is what is left of the whole once the consumer's pauses are taken
    # out, on a quiet machine or a loaded one (counting the pauses would exceed this by 0.5 s)
    assert 0 < turn.counts.wall_s <= elapsed - pauses


def test_sampling_verdicts_carry_the_uniform_they_were_tested_with(models):
    """Accepted draft tokens had u < p/q, the first refused one u >= p/q; later ones untested."""
    target, draft = models
    rng = np.random.default_rng(11)
    engine = SpeculativeEngine(target, ModelDrafter(draft, SAMPLING, rng), SAMPLING,
                               DraftSettings(k=4), rng)
    events, _ = run(engine, prompt_ids(target, "uniforms"), max_tokens=60)
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    accepted = [e for e in tokens if e.kind is TokenKind.ACCEPTED]
    assert accepted and all(e.u < min(1.0, e.p / e.q) for e in accepted)
    for r in {e.round for e in tokens}:
        refused = [e for e in tokens if e.round == r and e.kind is TokenKind.REJECTED]
        if refused:
            assert refused[0].u >= min(1.0, refused[0].p / refused[0].q) - 1e-12
            assert all(e.u is None for e in refused[1:])
    assert all(e.u is None for e in tokens if e.kind in (TokenKind.CORRECTED, TokenKind.BONUS))


def test_the_speedup_baseline_is_timed_in_the_turn_and_after_it_and_leaves_no_trace(models):
    """Target-only steps timed among a speculative turn's rounds (one every BASELINE_EVERY) and
    the rest after it give its baseline and speedup; the caches are as if they never ran, and
    the reply and the next turn are the same as without them."""
    target, draft = models
    ids = prompt_ids(target, "baseline at depth")
    runs = {}
    for steps in (0, 3):
        engine = SpeculativeEngine(target, make_drafter("model", draft), GREEDY, DraftSettings(k=3))
        engine.clear_caches()
        events, turn = run(engine, ids, max_tokens=24, baseline_steps=steps)
        committed = ids + turn.token_ids
        assert_caches_hold(committed, target, draft)
        follow = committed + prompt_ids(target, " and then")
        _, after = run(engine, follow, max_tokens=12)
        runs[steps] = (events, turn, after)
    plain, probed = runs[0][1], runs[3][1]
    assert plain.counts.speedup is None and plain.counts.baseline_source == "not measured"
    rounds = [e for e in runs[3][0] if isinstance(e, RoundEvent)]
    assert BASELINE_EVERY < len(rounds) < 2 * BASELINE_EVERY  # one step in the turn, two after
    first = len(ids) + sum(r.emitted for r in rounds[:BASELINE_EVERY])
    depth = len(ids) + probed.counts.n_tokens
    assert probed.counts.baseline_source == f"3 target-only steps at depths {first}-{depth}"
    assert probed.counts.baseline_tokens_per_second and probed.counts.baseline_tokens_per_second > 0
    c = probed.counts
    assert c.speedup == pytest.approx(c.tokens_per_second / c.baseline_tokens_per_second)
    assert probed.token_ids == plain.token_ids and runs[3][2].token_ids == runs[0][2].token_ids
    assert probed.counts.target_passes == plain.counts.target_passes  # the steps' passes are not the reply's


class SlowSingles:
    """A real backend whose one-token passes take `pause` seconds more: a baseline step is one."""

    def __init__(self, inner, pause: float) -> None:
        self._inner, self.pause = inner, pause

    def eval(self, tokens, logits_from):
        if len(tokens) == 1:
            time.sleep(self.pause)
        return self._inner.eval(tokens, logits_from)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def test_baseline_steps_in_a_turn_add_nothing_to_its_decode_time(models):
    """The steps among the rounds are the baseline's time, not the reply's: the decode time is
    its rounds' own. A step timed into the reply would add a whole slow pass to it."""
    target, draft = models
    pause = 0.5
    engine = SpeculativeEngine(SlowSingles(target, pause), make_drafter("model", draft), GREEDY,
                               DraftSettings(k=3))
    events, turn = run(engine, prompt_ids(target, "slow singles"), max_tokens=40,
                       baseline_steps=2)
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert len(rounds) > 2 * BASELINE_EVERY and turn.counts.baseline_source.startswith("2 target-only steps at depths ")
    assert 1 / turn.counts.baseline_tokens_per_second > pause  # the steps were the slow one-token passes
    own = sum(r.draft_s + r.verify_s for r in rounds[1:])  # decode time starts at the first token
    assert turn.counts.decode_s < own + pause / 2


def test_a_target_only_turn_is_its_own_baseline_and_a_stopped_turn_has_none(models):
    target, draft = models
    ids = prompt_ids(target, "own baseline")
    _, alone = run(SpeculativeEngine(target, NoDrafter(), GREEDY), ids, max_tokens=16,
                   baseline_steps=3)
    assert alone.counts.baseline_source == "this turn (target only)" and alone.counts.speedup == pytest.approx(1.0)
    cancel = threading.Event()
    cancel.set()
    engine = SpeculativeEngine(target, make_drafter("model", draft), GREEDY, DraftSettings(k=3))
    stopped = turn_of(engine.generate(ids, GenerationSettings(max_tokens=16, baseline_steps=3),
                                      cancel))
    assert stopped.stop_reason == "cancelled" and stopped.counts.baseline_tokens_per_second is None


def test_a_long_replys_baseline_steps_spread_over_its_depths():
    """A step costs more deeper in a reply. The steps are taken at rounds 6, 12, 24, 48, ...
    and the latest 4 kept, so a 200-round reply is measured at rounds 24-192, not at its first
    24 (where a reply of plain steps read 0.9x against its own baseline); a reply too short
    for all 4 takes the rest where it ended. Step times here are faked: 1 ms a token of depth."""
    def time_steps(committed: list[int], n: int) -> list[float]:
        return [len(committed) / 1000] * n

    def steps_of(rounds: int) -> list[int]:
        baseline = Baseline(GenerationSettings(baseline_steps=4), time_steps, speculates=True)
        committed = [0] * 10
        for round_no in range(1, rounds + 1):
            committed.append(0)
            baseline.between_rounds(round_no, committed, ReplyClock())
        rate, source = baseline.rate(None, committed, "max_tokens")
        depths = [depth for depth, _ in baseline.steps]
        assert rate == pytest.approx(1000 / statistics.median(depths))
        assert source == f"4 target-only steps at depths {min(depths)}-{max(depths)}"
        return depths

    assert steps_of(200) == [34, 58, 106, 202]
    assert steps_of(30) == [16, 22, 34, 40]


def test_each_round_the_adaptive_policy_declines_says_why_and_the_turn_sums_it_up(models):
    """On the tiny pair a plain step is cheaper than any draft, so the adaptive policy
    declines: each declined round carries its reason, and the turn says where drafting stopped
    and why; a round that drafts carries none."""
    target, draft = models
    engine = SpeculativeEngine(target, ModelDrafter(draft, GREEDY, np.random.default_rng(0)),
                               GREEDY, DraftSettings(k=8, policy_kind=PolicyKind.ADAPTIVE))
    events = list(engine.generate(prompt_ids(target, "hello world"),
                                  GenerationSettings(max_tokens=40)))
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    declined = [r for r in rounds if r.declined]
    assert declined and all(r.why for r in declined)
    assert all(not r.why for r in rounds if not r.declined)
    last_drafted = max((r.round for r in rounds if r.drafted), default=-1)
    stop = next(r for r in declined if r.round > last_drafted)  # where the last stretch began
    turn = turn_of(events)
    assert turn.diagnostics.drafting_note.startswith("stopped at token") and turn.diagnostics.drafting_note.endswith(
        ": " + stop.why)
