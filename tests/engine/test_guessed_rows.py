"""Draft passes that also read guessed tokens (engine/guessed_rows.py), on the tiny real models:
the draft proposes what it proposes one token a pass, in fewer passes where the conversation
repeats, and its cache keeps only what the committed tokens allow."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.checks import SAMPLING, calibrated_near_tie
from support.models import GREEDY, load, prompt_ids

from specchat.engine.guessed_rows import GuessedRows
from specchat.engine.model_drafter import ModelDrafter
from specchat.engine.policy import FixedPolicy
from specchat.engine.sampling import row_summary

DRAFT_SHAPE = (1.0, 1.7, 2.3, 1.5, 2.2, 2.9, 3.4, 2.3)
"""The 0.5B Q4_0 draft's passes over 1-8 tokens in one-token passes, as `specchat models
optimize` timed them on a 2-core AVX-512 EPYC: 4 tokens cost less than 2."""


@pytest.fixture(scope="module", params=["F32 draft", "Q4_0 draft"])
def drafts(request, tiny, q4_0_draft):
    """The same draft file loaded twice: one drafting a token a pass, one widening its passes."""
    path = tiny.draft if request.param == "F32 draft" else q4_0_draft.path
    plain, guessing = load(path), load(path)
    yield plain, guessing
    plain.close()
    guessing.close()


@pytest.fixture(scope="module")
def draft_near_tie(drafts) -> float:
    return calibrated_near_tie(drafts[0], floor=1e-3)


def gap_after(backend, seq: list[int]) -> float:
    """The draft's top-2 logit gap after `seq`, one token a pass from an empty cache."""
    backend.truncate(0)
    return row_summary(backend.eval(seq, len(seq) - 1)[0]).gap


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(alphabet="abcde fgh.", min_size=2, max_size=12), repeats=st.integers(1, 4),
       kept=st.lists(st.integers(0, 6), min_size=4, max_size=4), sampled=st.booleans(),
       seed=st.integers(0, 2**16))
def test_a_widened_pass_proposes_what_one_token_passes_propose(drafts, draft_near_tie, text,
                                                              repeats, kept, sampled, seed):
    """Over rounds whose drafts stand in part (the target's token after them made up), the
    widening draft proposes the same tokens with the same probabilities as the plain one (the
    same random draws where it samples), up to a near-tie of the plain draft's own row; and
    after each release its cache holds only committed tokens."""
    plain_backend, guessing_backend = drafts
    sampling = SAMPLING if sampled else GREEDY
    plain = ModelDrafter(plain_backend, sampling, np.random.default_rng(seed))
    guessing = ModelDrafter(guessing_backend, sampling, np.random.default_rng(seed), DRAFT_SHAPE)
    committed = prompt_ids(plain_backend, text * repeats)
    policy = FixedPolicy(6)
    for stand in kept:
        mine, theirs = guessing.propose(committed, policy.plan(8)), plain.propose(committed,
                                                                                  policy.plan(8))
        if mine.tokens != theirs.tokens:
            assert not sampled, "the same draws from the same rows propose the same tokens"
            at = next(i for i, (a, b) in enumerate(zip(mine.tokens, theirs.tokens)) if a != b)
            assert gap_after(plain_backend, committed + theirs.tokens[:at]) <= draft_near_tie
            return
        assert np.allclose(mine.q, theirs.q, atol=1e-3)
        committed = committed + theirs.tokens[:stand] + [(sum(committed) + stand) % 100 + 1]
        guessing.release(committed)
        plain.release(committed)
        assert guessing_backend.tokens == committed[: len(guessing_backend.tokens)]


def test_a_repeating_conversation_is_drafted_in_fewer_passes(drafts):
    """The tiny draft, left to go on from "hello", repeats itself now and then (as a draft on
    an edit repeats the file): its guesses are then its own next tokens and a pass yields
    several, so its continuation takes fewer passes than tokens, where one token a pass takes
    one a token. (With the guesses' rows unused it takes as many.) Each draft says how many
    tokens its passes after the first drew, which the policy prices a token by: one a pass
    drafting a token a pass, more where a pass read guesses the draft then proposed."""
    passes_a_token, guessed_rounds = [], []
    for backend, steps in zip(drafts, ((), DRAFT_SHAPE), strict=True):
        drafter = ModelDrafter(backend, GREEDY, np.random.default_rng(0), steps)
        drafter.release([])
        committed = prompt_ids(backend, "hello")
        before, start = drafter.passes, len(committed)
        guessed = 0
        for _ in range(12):  # every draft stands, with no token of the target's after it
            passes = drafter.passes
            draft = drafter.propose(committed, FixedPolicy(6).plan(8))
            later_passes = drafter.passes - passes - 1
            assert later_passes <= draft.cost.later_draws <= len(draft) - 1
            guessed += draft.cost.later_draws > later_passes
            committed = committed + draft.tokens
        passes_a_token.append((drafter.passes - before) / (len(committed) - start))
        guessed_rounds.append(guessed)
    plain, guessing = passes_a_token
    assert plain == 1.0 and guessing < 1.0
    assert guessed_rounds[0] == 0 and guessed_rounds[1] > 0


def test_a_pass_is_widened_only_where_the_timed_curve_makes_it_pay():
    """A match of two tokens or more is read with the pass where the wider batch costs less
    than the pass a right guess saves; without one, a pass is padded only to a cheaper batch;
    without a curve (a GPU, an untimed file) never."""
    rows = GuessedRows(DRAFT_SHAPE)
    seq = [5, 6, 7, 8, 9, 1, 2, 5, 6]
    rows.index.update(seq)
    assert rows.extra(seq, 1, 5) == [7, 8, 9]  # [5, 6] matched: 4 rows for 1.5 passes
    assert rows.extra(seq + [7, 3], 1, 5) == []  # [3] never came before: 4 rows cost 1.5
    assert rows.extra(seq + [4, 3], 2, 5) == [3, 3]  # 2 rows cost more than 4: padded
    assert rows.extra([9, 1, 4, 9], 1, 5) == []  # a one-token match does not pay for 0.5 pass
    assert rows.extra(seq, 4, 5) == []  # 4 rows: nothing cheaper within 3 more
    assert GuessedRows(()).extra(seq, 1, 5) == []
    flat = GuessedRows((1.0, 1.02, 1.04, 1.06))
    flat.index.update(seq)
    assert flat.extra(seq, 1, 5) == [7, 8, 9]  # on a flat curve the widest is as cheap
