"""A draft model with another vocabulary drafting as text, on tiny real GGUFs with two
vocabularies: greedy replies equal target-only (up to a near-tie) over prompts, the UTF-8
boundaries over texts, the draft's cache kept across rounds, and sampling that follows the
target's distribution on the shared tokens (chi-square, beside a wrong-rule control)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.checks import (
    SAMPLING,
    check_greedy_rule,
    check_sampling_rule,
    wrong_rule,
)
from support.models import GREEDY, load, prompt_ids, run
from support.plans import PassesFor

from specchat.engine import kvsync
from specchat.engine.events import RoundEvent
from specchat.engine.loop import DraftSettings, SpeculativeEngine
from specchat.engine.policy import PolicyKind
from specchat.engine.text_drafter import (
    SharedTokens,
    TextDrafter,
    decode,
    encode,
    incomplete_tail,
    round_trips,
    valid_text,
)
from specchat.ui.widgets.step_panel import describe_round


@pytest.fixture(scope="module")
def text_pair(models, tmp_path_factory):
    """The tiny target (recording) and a draft with another vocabulary: the tiny draft's
    weights (the target's plus noise) with two token texts swapped, so the same text is other
    token ids (llama.cpp's rule refuses it: token 40 differs) while the model mostly agrees."""
    from support.tinymodels import TinySpec, write_tiny_gguf

    path = tmp_path_factory.mktemp("text") / "tiny-draft-swapped.gguf"
    base = write_tiny_gguf(tmp_path_factory.mktemp("base") / "t.gguf", TinySpec(seed=0))
    write_tiny_gguf(path, TinySpec(seed=1, base=base, noise=0.08, swap_tokens=(40, 41)))
    other = load(path)
    yield models[0], other
    other.close()


@given(st.text(max_size=12))
def test_incomplete_tail_finds_a_cut_character(text):
    data = text.encode()
    assert incomplete_tail(data) == 0
    for cut in range(1, len(data)):
        head = data[:cut]
        tail = incomplete_tail(head)
        head[:len(head) - tail].decode()  # what is left decodes
        if tail:
            with pytest.raises(UnicodeDecodeError):
                head.decode()


def test_both_tiny_vocabularies_round_trip_text_and_differ(text_pair):
    target, other = text_pair
    assert round_trips(target) and round_trips(other)
    text = "(" + ")" * 3
    assert encode(target, text) != encode(other, text)
    assert decode(target, encode(target, text)) == decode(other, encode(other, text))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(text=st.sampled_from(["hello world", "the cat sat on", "(a (b) c)", "0123456789",
                             "speculative decoding", "ÄÖÜ é 日本語"]), k=st.integers(1, 5))
def test_greedy_drafting_as_text_matches_target_only_up_to_a_near_tie(text_pair, near_tie, text, k):
    target, other = text_pair
    drafter = TextDrafter(other, target, GREEDY, np.random.default_rng(0))
    check_greedy_rule(target, drafter, prompt_ids(target, text), k, PolicyKind.FIXED, near_tie)


def test_the_draft_proposes_target_tokens_and_keeps_its_cache(text_pair):
    target, other = text_pair
    drafter = TextDrafter(other, target, GREEDY, np.random.default_rng(0))
    engine = SpeculativeEngine(target, drafter, GREEDY, DraftSettings(k=3))
    prompt = prompt_ids(target, "f(x) = (y)")
    events, turn = run(engine, prompt, max_tokens=24)
    rounds = [e for e in events if isinstance(e, RoundEvent) and e.drafted]
    assert rounds and turn.counts.n_drafted > 0 and turn.counts.n_accepted > 0
    # each round says what the draft wrote in its own tokens, which step-through shows
    assert all(r.draft_pieces for r in rounds)
    last = max(i for i, e in enumerate(events) if isinstance(e, RoundEvent) and e.drafted)
    first = max((i for i, e in enumerate(events[:last]) if isinstance(e, RoundEvent)),
                default=-1) + 1
    assert "In its own vocabulary the draft wrote" in describe_round(events[first:last + 1],
                                                                     None).plain
    # the draft's cache holds the conversation in its own tokens (bytes that are not UTF-8
    # read as U+FFFD there), not the target's ids
    text = decode(target, target.tokens).decode(errors="replace").encode()
    held = decode(other, other.tokens)
    assert len(held) > len("f(x) = (y)") and text.startswith(held)
    assert other.tokens[:len(prompt)] != prompt
    assert drafter.encode_s > 0


def test_the_shared_tokens_map_each_text_to_the_target_id_that_spells_it(text_pair):
    target, other = text_pair
    shared = SharedTokens(other, target)
    assert shared.target_of[40] == 41 and shared.target_of[41] == 40  # the swapped texts
    assert all(other.token_bytes(d) == target.token_bytes(t) for d, t in shared.target_of.items())
    assert len(set(shared.target_of.values())) == len(shared.target_of)
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(other.n_vocab))
    q = shared.restrict(probs)
    assert q is not None and q.sum() == pytest.approx(1.0)
    special = next(t for t in range(other.n_vocab) if not other.token_bytes(t))
    assert q[special] == 0.0  # a control token has no text: never drafted
    on_target = shared.on_target(q)
    assert on_target.sum() == pytest.approx(1.0) and on_target[41] == q[40]


@pytest.mark.parametrize("rule", ["p/q rule", "wrong rule"])
def test_sampling_on_the_shared_tokens_follows_the_target_distribution(text_pair, monkeypatch,
                                                                       rule):
    """The draft samples from its distribution on the shared tokens and says so (q), so the
    p/q rule keeps the target's distribution; a subtly wrong rule (resampling from p on a
    rejection) must fail the same test."""
    target, other = text_pair
    ids = prompt_ids(target, "hello world")
    if rule == "wrong rule":
        monkeypatch.setattr("specchat.engine.verify.verify_sampling", wrong_rule)
    rng = np.random.default_rng(11)
    drafter = TextDrafter(other, target, SAMPLING, rng)
    proposed = []
    propose = drafter.propose
    drafter.propose = lambda committed, plan: proposed.append(propose(committed, plan)) \
        or proposed[-1]  # type: ignore[method-assign]
    engine = SpeculativeEngine(target, drafter, SAMPLING, DraftSettings(k=2), rng)
    check_sampling_rule(engine, target, ids, exact=rule == "p/q rule", n=6000)
    drafted = [d for d in proposed if d.tokens]
    assert len(drafted) > 4000  # a draft nearly every round: the control has power
    assert all(d.dists is not None and d.dists[i][tok] == pytest.approx(d.q[i])
               for d in drafted[:50] for i, tok in enumerate(d.tokens))


@given(st.text(max_size=8), st.binary(max_size=6))
def test_a_continuation_is_cut_before_a_cut_or_broken_character(text, junk):
    data = text.encode() + junk
    valid = valid_text(data)
    assert data.startswith(valid.encode()) and valid.startswith(text[:0])
    assert len(valid.encode()) >= len(text.encode()) or not data.decode(errors="ignore")


def test_a_new_target_of_another_vocabulary_type_drops_the_draft_with_the_reason(tiny):
    """SentencePiece against BPE is still refused (judged from the headers): the draft falls
    back to none and its model is freed; one of the same type keeps drafting, as text."""
    from specchat.engine.drafters import NoDrafter
    from specchat.engine.model_drafter import ModelDrafter
    from specchat.loading import fit_drafter

    target, spm, other = load(tiny.target), load(tiny.spm_vocab), load(tiny.other_vocab)
    try:
        drafter = ModelDrafter(load(tiny.draft), GREEDY, np.random.default_rng(0))
        fitted, note = fit_drafter(other, drafter)
        assert isinstance(fitted, TextDrafter) and fitted.target is other
        assert note == "; another vocabulary: the draft drafts as text"
        dropped, note = fit_drafter(spm, fitted)
        assert isinstance(dropped, NoDrafter) and "vocabulary types differ" in note
        back, note = fit_drafter(target, ModelDrafter(load(tiny.draft), GREEDY,
                                                      np.random.default_rng(0)))
        assert isinstance(back, ModelDrafter) and note == ""
        back.close()
    finally:
        for model in (target, spm, other):
            model.close()


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLING], ids=["greedy", "sampling"])
def test_the_draft_runs_no_pass_for_a_token_the_plan_would_not_keep(text_pair, sampling):
    target, other = text_pair
    prompt = prompt_ids(target, "f(x) = (y)")
    passes = []
    for worth in (2, 6):
        kvsync.release(other, [])
        before = other.passes
        TextDrafter(other, target, sampling, np.random.default_rng(0)).propose(
            prompt, PassesFor(k=6, worth=worth))
        passes.append(other.passes - before)
    assert passes[0] == 2 < passes[1]  # the catch-up pass and one more, where 6 were worth it
