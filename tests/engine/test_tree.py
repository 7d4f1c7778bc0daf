"""Draft trees: the chain and alternatives beside its unsure tokens, verified in one target pass.

Greedy: the reply is target-only's up to a near-tie, every committed token the argmax of the
row it was checked at, and a verifier that takes a branch the target did not choose fails.
Sampling: the multi-draft rule (siblings drawn without replacement) outputs exactly the target's
distribution, for the rule alone (hypothesis, chi-square) and for the engine on the tiny pair;
a rule that forgets the siblings drawn before fails both. After every tree round the cache holds
exactly the committed tokens, in llama.cpp's sequences as in the mirror."""

from __future__ import annotations

import llama_cpp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.checks import (
    GREEDY_CASES,
    SAMPLING,
    check_greedy_rule,
    check_sampling_rule,
    chi_square_p,
    make_drafter,
)
from support.models import GREEDY, prompt_ids

from specchat.engine import tree as tree_rule
from specchat.engine.events import RoundEvent, TokenEvent, TokenKind
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.model_drafter import ModelDrafter
from specchat.engine.ngram_drafter import NgramDrafter
from specchat.engine.policy import FixedPolicy, MachineCosts, PolicyKind, TreeSettings
from specchat.engine.policy.acceptance import Acceptance
from specchat.engine.policy.branching import Branching, BranchRates
from specchat.engine.sampling import sample
from specchat.engine.tree import DraftTree, TreeVerdict, verify_tree_sampling
from specchat.engine.types import Branch, Draft

ALWAYS = TreeSettings(nodes=6, p_max=1.01, width=3)
"""Branch beside every draft token, while 6 alternatives last: trees in every round."""


# -- greedy -------------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**GREEDY_CASES)
def test_greedy_trees_reply_as_the_target_alone(models, near_tie, text, k, drafter, policy):
    target, draft = models
    events = check_greedy_rule(target, make_drafter(drafter, draft), prompt_ids(target, text),
                               k, policy, near_tie, tree=ALWAYS)
    if drafter == "model" and policy == PolicyKind.FIXED:  # the fixed policy branches wherever it drafts
        assert all(e.branch_nodes for e in events if isinstance(e, RoundEvent) and e.drafted)


def test_an_earlier_ngram_match_that_went_on_otherwise_is_a_branch():
    """The latest `1 2 3 4` went on with 7, the one before with 9: 9 is verified beside 7."""
    drafter = NgramDrafter(3, 4)
    committed = [1, 2, 3, 4, 9, 5, 1, 2, 3, 4, 7, 6, 1, 2, 3, 4]
    draft = drafter.propose(committed, FixedPolicy(3, tree=TreeSettings()).plan(3))
    assert draft.tokens == [7, 6, 1]
    assert [(b.at, b.tokens, b.q, b.dists) for b in draft.branches] == [(0, [9], [1.0], None)]
    chains = drafter.propose(committed, FixedPolicy(3).plan(3))
    assert chains.tokens == [7, 6, 1] and not chains.branches


def test_branches_stand_and_lose_and_are_told_apart(models, near_tie):
    """Over a few prompts, some branch replaced a refused chain token (an accepted token
    marked `branch`) and many lost (refused, marked `branch`); a round's accepted count
    includes a branch that stood and never exceeds its chain."""
    target, draft = models
    won = lost = 0
    for text in ("the cat sat on", "hello world", "0123456789", "speculative decoding"):
        events = check_greedy_rule(target, make_drafter("model", draft),
                                   prompt_ids(target, text), 3, False, near_tie, tree=ALWAYS)
        tokens = [e for e in events if isinstance(e, TokenEvent) and e.branch]
        won += sum(e.kind is TokenKind.ACCEPTED for e in tokens)
        lost += sum(e.kind is TokenKind.REJECTED for e in tokens)
        for r in (e for e in events if isinstance(e, RoundEvent)):
            assert r.accepted <= r.drafted
    assert won > 0 and lost > won


def test_a_verifier_that_takes_a_branch_the_target_did_not_choose_fails(models, near_tie,
                                                                       monkeypatch):
    rule = tree_rule.verify_tree_greedy

    def takes_the_first_branch(tree, argmax):
        verdict = rule(tree, argmax)
        wrong = [c for c in tree.children(-1) if c >= tree.chain]
        if not verdict.path and wrong:
            return TreeVerdict([wrong[0]], int(argmax[wrong[0] + 1]))
        return verdict

    monkeypatch.setattr("specchat.engine.tree.verify_tree_greedy", takes_the_first_branch)
    target, draft = models
    with pytest.raises(AssertionError):
        for text in ("the cat sat on", "hello world", "0123456789"):
            check_greedy_rule(target, make_drafter("model", draft), prompt_ids(target, text), 3,
                              False, near_tie, tree=ALWAYS)


def test_after_tree_rounds_the_cache_holds_exactly_the_committed_tokens(models):
    """After each round the cache holds committed tokens only: all but the target's own last
    one, and a branch's token that stood (evaluated again with it next round, in the text's
    order). llama.cpp's cache is as the mirror says: no other sequence keeps a cell, and the
    next token's row equals one computed on a cache filled from scratch with the same tokens
    (the rounding of a batch: a cache out of order rounds 1000 times further)."""
    target, draft = models
    ids = prompt_ids(target, "the cat sat on")
    engine = SpeculativeEngine(target, make_drafter("model", draft), GREEDY,
                               DraftSettings(k=3, tree=ALWAYS))
    committed = list(ids)
    rounds = 0
    for event in engine.generate(ids, GenerationSettings(max_tokens=30)):
        if isinstance(event, TokenEvent) and event.kind is not TokenKind.REJECTED:
            committed.append(event.id)
        if isinstance(event, RoundEvent):
            rounds += 1
            assert target.tokens == committed[:len(target.tokens)]
            assert len(target.tokens) >= len(committed) - 2
    assert rounds > 3
    inner = target._inner
    for seq in range(1, 16):
        assert llama_cpp.llama_memory_seq_pos_max(inner._mem, seq) == -1
    assert llama_cpp.llama_memory_seq_pos_max(inner._mem, 0) == len(target.tokens) - 1
    kept = target.tokens[:]
    after = inner.eval([committed[len(kept)]] if len(kept) < len(committed) else [7], 0)[0]
    inner.truncate(0)
    fresh = inner.eval(kept + ([committed[len(kept)]] if len(kept) < len(committed) else [7]),
                       len(kept))[0]
    assert np.abs(after - fresh).max() < 1e-4
    inner.truncate(0)


# -- sampling: the rule alone ------------------------------------------------------------------
def _root_tree(q: np.ndarray, n: int, rng, point_masses: bool) -> Draft:
    """A draft of one chain token and n - 1 alternatives at the root, drawn from q without
    replacement (or, as point masses, a fixed guess each)."""
    left = q.copy()
    tokens = []
    for _ in range(n):
        if left.sum() <= 0:
            break
        tok = sample(left, rng)
        tokens.append(tok)
        left[tok] = 0.0
    dists = None if point_masses else [q]
    return Draft(tokens=tokens[:1], q=[float(q[tokens[0]])], dists=dists,
                 branches=[Branch(0, [t], [float(q[t])], dists) for t in tokens[1:]])


def _first_token(verdict: TreeVerdict, tree: DraftTree) -> int:
    return tree.tokens[verdict.path[0]] if verdict.path else verdict.next_token


def _forgets_siblings(tree, p_dists, rng):
    """A common mistake: test every sibling against the draft's whole distribution, as if it
    were drawn with replacement."""
    p = p_dists[0]
    for child in tree.children(-1):
        tok, q = tree.tokens[child], tree.dists[child]
        if rng.random() * q[tok] < p[tok]:
            return TreeVerdict([child], sample(p_dists[child + 1], rng))
        p = np.maximum(p - q, 0.0)
        p = p / p.sum() if p.sum() > 0 else p_dists[0]
    return TreeVerdict([], sample(p, rng))


def _keeps_p(tree, p_dists, rng):
    """Another: test each sibling against the target's p as it was, never its residual."""
    p = p_dists[0]
    for child in tree.children(-1):
        tok, q = tree.tokens[child], tree.proposal(child, p.size)
        if rng.random() * q[tok] < p[tok]:
            return TreeVerdict([child], sample(p_dists[child + 1], rng))
    return TreeVerdict([], sample(np.maximum(p - tree.dists[0], 0.0), rng))


VOCAB = 6


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), width=st.integers(2, 4),
       point_masses=st.booleans())
def test_the_multi_draft_rule_outputs_the_target_distribution(seed, width, point_masses):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(VOCAB, 0.7))
    q = rng.dirichlet(np.full(VOCAB, 0.7))
    counts = np.zeros(VOCAB)
    for _ in range(6000):
        tree = DraftTree.of(_root_tree(q, width, rng, point_masses))
        p_dists = [p] + [p] * len(tree)
        counts[_first_token(verify_tree_sampling(tree, p_dists, rng), tree)] += 1
    assert chi_square_p(counts, p) > 1e-4


def test_a_rule_that_forgets_the_siblings_drawn_before_fails():
    rng = np.random.default_rng(3)
    p = np.array([0.05, 0.05, 0.3, 0.3, 0.3])
    q = np.array([0.45, 0.45, 0.05, 0.03, 0.02])  # the draft's top two are the target's least
    counts = np.zeros(p.size)
    for _ in range(6000):
        tree = DraftTree.of(_root_tree(q, 3, rng, False))
        counts[_first_token(_forgets_siblings(tree, [p] * (len(tree) + 1), rng), tree)] += 1
    assert chi_square_p(counts, p) < 1e-4


# -- sampling: the engine on the tiny pair ----------------------------------------------------
@pytest.mark.parametrize("rule", ["multi-draft rule", "p never the residual"])
def test_tree_sampling_follows_the_target_distribution(models, rule, monkeypatch):
    target, draft = models
    ids = prompt_ids(target, "sampling")
    if rule == "p never the residual":
        monkeypatch.setattr("specchat.engine.tree.verify_tree_sampling", _keeps_p)
    rng = np.random.default_rng(11)
    engine = SpeculativeEngine(target, ModelDrafter(draft, SAMPLING, rng), SAMPLING,
                               DraftSettings(k=1, tree=ALWAYS), rng)
    check_sampling_rule(engine, target, ids, exact=rule == "multi-draft rule")


# -- the policy's part ---------------------------------------------------------------------------
def test_branching_keeps_to_its_budget_threshold_and_width():
    rates, acceptance, machine = BranchRates(), Acceptance(), MachineCosts()
    plan = Branching(nodes=3, p_max=0.8, width=3)
    assert plan.alternatives(rates, acceptance, machine, "d", 0, 0.95, [0.03, 0.01], 4, 0.0) == 0
    assert plan.alternatives(rates, acceptance, machine, "d", 1, 0.5, [0.3, 0.1, 0.05], 4, 0.0) == 2
    assert plan.alternatives(rates, acceptance, machine, "d", 2, 0.5, [0.3, 0.1], 4, 0.0) == 1
    assert plan.alternatives(rates, acceptance, machine, "d", 3, 0.5, [0.3, 0.1], 4, 0.0) == 0


def test_the_plan_hears_of_every_kept_token_so_a_trees_reach_follows_the_chain(models):
    """A confident token gets no alternatives, but the plan is told of it: the chance that the
    round reaches the next position includes it."""
    target, draft = models
    plan = FixedPolicy(3, tree=TreeSettings(p_max=0.0)).plan(3)  # never unsure enough
    told: list[int] = []
    ask = plan.alternatives
    plan.alternatives = lambda source, i, conf, chances: told.append(i) or ask(  # type: ignore[method-assign]
        source, i, conf, chances)
    drafted = ModelDrafter(draft, GREEDY, np.random.default_rng(0)).propose(
        prompt_ids(target, "the cat sat on"), plan)
    draft.truncate(0)
    assert len(drafted) == 3 and told == [0, 1, 2] and not drafted.branches
    assert plan.branching.reach == pytest.approx(np.prod([min(c, 0.9) for c in drafted.conf]))


def test_priced_branching_takes_rows_the_verify_curve_gives_cheaply():
    """Where 8 rows cost what 5 do (a known curve), alternatives fill the batch; where each
    row costs a whole step, none pays at a rate of 1 token a step."""
    rates = BranchRates()
    cheap, dear = MachineCosts(), MachineCosts()
    cheap.shape = (1.0, 1.6, 2.1, 1.4, 1.5, 1.5, 1.5, 1.5)
    dear.shape = tuple(float(n) for n in range(1, 9))
    for machine in (cheap, dear):
        machine.learn_verify(1, 0.05)
    taken = Branching(nodes=4, p_max=0.9, priced=True).alternatives(
        rates, Acceptance(), cheap, "d", 0, 0.5, [0.8, 0.5], 4, 1 / 0.05)
    none = Branching(nodes=4, p_max=0.9, priced=True).alternatives(
        rates, Acceptance(), dear, "d", 0, 0.5, [0.8, 0.5], 4, 1 / 0.05)
    assert taken == 2 and none == 0
