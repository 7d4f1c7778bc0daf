"""Verification rules, for all inputs (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from support.checks import chi_square_p, wrong_rule

from specchat.engine.sampling import SamplingParams, row_summary, sample
from specchat.engine.verify import verify_greedy, verify_sampling

tokens = st.lists(st.integers(0, 5), min_size=0, max_size=6)


@given(draft=tokens, data=st.data())
def test_greedy_accepts_the_longest_agreeing_prefix(draft, data):
    target = data.draw(st.lists(st.integers(0, 5), min_size=len(draft) + 1,
                                max_size=len(draft) + 1))
    v = verify_greedy(draft, target)
    assert draft[: v.n_accepted] == target[: v.n_accepted]
    if v.n_accepted < len(draft):
        assert draft[v.n_accepted] != target[v.n_accepted]
    assert v.next_token == target[v.n_accepted]


def dist(n: int) -> st.SearchStrategy[np.ndarray]:
    return st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n).filter(
        lambda xs: sum(xs) > 0.05).map(lambda xs: np.array(xs) / sum(xs))


def first_token_frequencies(rule, p, q, n, rng):
    """Draft one token from q (or the point mass), verify, and count the first output token."""
    counts = np.zeros(p.size)
    for _ in range(n):
        if q is None:
            d, q_dists = 0, None
        else:
            d, q_dists = sample(q, rng), [q]
        v = rule([d], q_dists, [p, p], rng)
        counts[d if v.n_accepted == 1 else v.next_token] += 1
    return counts


@settings(max_examples=15, deadline=None)
@given(p=dist(5), q=dist(5), seed=st.integers(0, 2**32 - 1))
def test_rejection_rule_reproduces_the_target_distribution(p, q, seed):
    rng = np.random.default_rng(seed)
    counts = first_token_frequencies(verify_sampling, p, q, 4000, rng)
    assert chi_square_p(counts, p) > 1e-4


@settings(max_examples=15, deadline=None)
@given(p=dist(5), seed=st.integers(0, 2**32 - 1))
def test_point_mass_drafter_reproduces_the_target_distribution(p, seed):
    rng = np.random.default_rng(seed)
    counts = first_token_frequencies(verify_sampling, p, None, 4000, rng)
    assert chi_square_p(counts, p) > 1e-4


def test_the_same_test_catches_a_wrong_rule():
    p = np.array([0.5, 0.3, 0.1, 0.05, 0.05])
    q = np.array([0.05, 0.05, 0.1, 0.3, 0.5])
    rng = np.random.default_rng(0)
    good = first_token_frequencies(verify_sampling, p, q, 4000, rng)
    bad = first_token_frequencies(wrong_rule, p, q, 4000, rng)
    assert chi_square_p(good, p) > 1e-4
    assert chi_square_p(bad, p) < 1e-6


@given(st.lists(st.floats(-30, 30), min_size=2, max_size=50),
       st.floats(0.1, 3.0), st.integers(0, 10), st.floats(0.05, 1.0))
def test_distribution_is_a_distribution_over_the_kept_tokens(logits, temperature, top_k, top_p):
    x = np.array(logits, dtype=np.float32)
    probs = SamplingParams(temperature, top_k, top_p).distribution(x)
    assert abs(probs.sum() - 1) < 1e-9 and (probs >= 0).all()
    assert np.isclose(x[probs > 0].max(), x.max())  # a most likely token always survives
    if 0 < top_k < x.size:
        assert (probs > 0).sum() <= top_k + np.sum(x == np.sort(x)[-top_k]) - 1


@given(st.lists(st.floats(-30, 30), min_size=2, max_size=50))
def test_row_summary(logits):
    x = np.array(logits, dtype=np.float32)
    top, gap, lse = row_summary(x)
    s = np.sort(x)
    assert x[top] == s[-1]
    assert abs(gap - (s[-1] - s[-2])) < 1e-5
    assert abs(lse - np.log(np.exp(x.astype(np.float64)).sum())) < 1e-3
