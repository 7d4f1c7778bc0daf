"""Exact in every mode: each way a reply can be made with the target on llama.cpp (the tiny
pair), listed from the code by support.modes, checked through the whole engine (greedy: the
target-only reply by the one oracle; sampling: the first two tokens' distribution, with the
check's power and a control it must fail). The other targets' modes are checked in their own
modules (test_hf_backend, test_rpc, tests/server); the listing below holds the table to the
schema and every row to a test that runs it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields

import pytest
from support import modes
from support.checks import MODE_FIGURES, check_mode
from support.models import RecordingBackend

from specchat import settings as schema
from specchat.engine.policy.branching import chance_given_refused
from specchat.engine.sampling import SamplingParams

LLAMACPP = modes.modes("llamacpp")


@pytest.fixture(scope="module")
def other_vocab(tiny):
    from support.models import load

    model = load(tiny.other_vocab_draft)
    yield model
    model.close()


@pytest.mark.parametrize("mode", LLAMACPP, ids=[m.id for m in LLAMACPP])
def test_mode(mode, models, other_vocab, near_tie, monkeypatch):
    target, draft = models
    MODE_FIGURES[mode] = check_mode(mode, target, draft, other_vocab, near_tie, monkeypatch)


# -- the list is the code's -------------------------------------------------------------------------
def test_every_value_of_the_schema_is_in_a_mode():
    """A policy, backend, place, drafter or sampling setting the code gains and no mode covers
    fails here."""
    every = modes.all_modes()
    assert {m.policy for m in every} >= set(schema.POLICIES)
    assert {m.target for m in every} == set(schema.BACKENDS) | set(modes.PLACES.values())
    assert {m.tree for m in every} == {False, True}
    assert {type(f.default) for f in fields(schema.DraftOptions) if f.name == "tree"} == {bool}
    assert set(modes.engine_drafters()) <= set(modes.DRAFTER_NAMES) | {
        modes.CombinedDrafter}, "a drafter class no mode names"
    assert {m.drafter for m in every} == set(modes.drafter_kinds())
    sampling = {f.name for f in fields(schema.SamplingOptions)} & {
        f.name for f in fields(SamplingParams)} - {"seed"}
    assert {m.decoding for m in every} == {"greedy"} | sampling
    for name in sampling:  # each one turned on in its mode
        assert getattr(modes.SAMPLERS[name], name) != getattr(SamplingParams(), name)
    assert set(modes.CHECKS) == set(modes.targets())


def test_every_mode_names_a_test_that_runs_it():
    """Each mode's check exists as collected: `test_mode[<id>]` in its target's module (the
    check itself reads the mode back from the engine it ran)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                           "no:cacheprovider", *modes.CHECKS.values()], capture_output=True, text=True,
                          timeout=240)
    collected = set(done.stdout.split())
    missing = [modes.check_of(m) for m in modes.all_modes() if modes.check_of(m) not in collected]
    assert not missing, f"modes no test runs: {missing[:5]} ({len(missing)} in all)"


def test_a_check_has_the_power_it_states_and_fails_the_bias_it_must_catch():
    """The statistics alone: at SAMPLES replies over MAX_CELLS cells the power against the
    adaptive tree's old bias is at least 99%, and the control moves that much."""
    import numpy as np

    assert modes.power(modes.MAX_CELLS, modes.SAMPLES) >= 0.99
    probs = np.array([0.10, 0.15, 0.25, 0.50])
    moved = modes.biased(probs)
    assert np.sum((moved - probs) ** 2 / probs) == pytest.approx(modes.BIAS_W2)
    assert modes.BIAS_W2 == pytest.approx(0.0216)


# -- the check catches what it is for ----------------------------------------------------------------
def _counts_read_from_the_draws(self, probs, tok, n):
    """The adaptive tree's old bias: each alternative's chance read from its own drawn
    probability, so how many are verified depends on what was drawn."""
    out, _ = _drawn_without(self, probs, tok, n)
    before, chances = float(probs[tok]), []
    for _, p in out:
        chances.append(chance_given_refused(p, before))
        before += p
    return out, chances


_drawn_without = modes.ModelDrafter._drawn_without


@pytest.mark.parametrize("drafter", ["as built", "counts read from the draws"])
def test_the_adaptive_tree_on_the_bias_it_had(models, near_tie, monkeypatch, drafter):
    """The tiny pair shaped to the issue's p and q (every row), through the whole engine with
    the adaptive policy and trees at temperature 1: the drafter as built passes the sampling
    check; counting the alternatives from their own draws (the old code) fails it."""
    target, draft = models
    tokens = [target.tokenize(c, special=False)[0] for c in "abcd"]
    shaped = RecordingBackend(modes.Shaped(target._inner, modes.BIASED_P, tokens))
    shaped_draft = modes.Shaped(draft, modes.BIASED_Q, tokens)
    mode = modes.Mode("llamacpp", "model", "adaptive", True, "temperature")
    if drafter == "as built":
        assert "a draft token stood" in check_mode(mode, shaped, shaped_draft, None, near_tie,
                                                   monkeypatch)
        return
    monkeypatch.setattr(modes.ModelDrafter, "_drawn_without", _counts_read_from_the_draws)
    with pytest.raises(AssertionError, match="chi-square p-value"):
        check_mode(mode, shaped, shaped_draft, None, near_tie, monkeypatch)
