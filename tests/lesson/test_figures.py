"""Every figure the lesson predicts agrees with the one it measured, within the run's own
uncertainty, on the shipped traces and live on the tiny pair (on a clock the models' passes
move, so a loaded host times the same machine); and every figure says where it came from."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.style import Style
from support.modes import FakeClock

from specchat.backends.llamacpp import LlamaCppBackend
from specchat.engine.events import RoundEvent, TokenKind
from specchat.keeper import ModelKeeper
from specchat.lesson import figures
from specchat.lesson.demos import DEMOS, SAMPLES, Demo, run_demo
from specchat.lesson.recordings import LiveRecordings, TraceRecordings
from specchat.lesson.script import load_lesson
from specchat.settings import DraftOptions, ModelOptions, SamplingOptions, Settings

STYLES = {kind: Style() for kind in TokenKind}
WHERE = ("shipped traces", "the shipped", "generated here now", "timed here now",
         "evaluated here now", "sampling-rows.json", "an H200's verify curve measured",
         f"the {2 * SAMPLES} draws: made now")
"""How a source line begins to say where its figures come from: a shipped trace (with when
and where it was recorded), this machine now, or the one GPU curve measured."""


def _rounds(drafted: int, accepted: list[int]) -> list[RoundEvent]:
    first = RoundEvent(0, drafted, 0, 0, 0.0, 0.01, 1, 0.01)
    return [first] + [RoundEvent(i + 1, drafted, drafted, a, 0.0, 0.01, a + 1, 0.01 * (i + 2))
                      for i, a in enumerate(accepted)]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(1, 8).flatmap(
    lambda k: st.tuples(st.just(k), st.lists(st.integers(0, k), min_size=1, max_size=40))))
def test_tokens_a_round_from_the_conditional_rates_equal_the_measured_mean(case):
    """Rounds of one draft length: 1 + a1 + a1 a2 + ... over the conditional rates is the mean
    of the tokens the rounds gave, exactly (the running share, taken as conditional, is not)."""
    k, accepted = case
    accept = figures.acceptance_of(list(_rounds(k, accepted)))
    assert accept is not None
    assert accept.predicted == pytest.approx(accept.tokens_a_round.value)
    assert accept.expected(k) == pytest.approx(accept.tokens_a_round.value)


def test_the_running_share_taken_as_conditional_predicts_too_few_tokens(monkeypatch):
    """The mutant the slides shipped: the share of rounds whose first i drafts all stood,
    multiplied through as if it were the chance given the ones before."""
    def running(rounds, k):
        rounds = list(rounds)
        return [(sum(a > i for _, a in rounds) / len(rounds), len(rounds)) for i in range(k)]
    rounds = _rounds(3, [3, 3, 0, 1, 3, 2, 3, 3])
    right = figures.acceptance_of(list(rounds))
    monkeypatch.setattr(figures, "conditional_rates", running)
    wrong = figures.acceptance_of(list(rounds))
    assert right is not None and wrong is not None
    assert right.predicted == pytest.approx(right.tokens_a_round.value)
    assert wrong.predicted < wrong.tokens_a_round.value - 0.25


def _checked(demos: dict[str, Demo]) -> list[figures.Check]:
    for name, demo in demos.items():
        assert demo.sources, name
        for source in demo.sources:
            assert source.startswith(WHERE), f"{name}: {source!r} does not say where it is from"
    return [check for demo in demos.values() for check in demo.checks]


def test_every_prediction_agrees_with_its_measurement_on_the_shipped_traces():
    recs = TraceRecordings()
    checks = _checked({name: run_demo(name, recs, STYLES) for name in DEMOS})
    assert {c.figure.split(":")[1].strip() for c in checks} == {"tokens a round", "speedup"}
    assert len(checks) >= 6
    assert all(c.agrees for c in checks), "\n".join(c.line() for c in checks if not c.agrees)
    for name in ("code-0.5b-draft-k3", "edit-ngram-k3"):
        assert any(name in s and "recorded 2026-12-0" in s
                   for s in run_demo("prose_vs_code", recs, STYLES).sources)


@pytest.fixture
def fake_clock(monkeypatch):
    """time.perf_counter moved only by the models' passes: the target's by its rows, a draft
    model's a fixed pass (FakeClock's machine)."""
    clock = FakeClock()
    monkeypatch.setattr(time, "perf_counter", clock)
    real_eval = LlamaCppBackend.eval

    def costed(self, tokens, logits_from):
        (clock.verify if self.name.startswith("tiny-target") else clock.draft)(len(tokens))
        return real_eval(self, tokens, logits_from)
    monkeypatch.setattr(LlamaCppBackend, "eval", costed)
    return clock


def test_every_prediction_agrees_with_its_measurement_live_on_the_tiny_pair(tiny, fake_clock,
                                                                              monkeypatch):
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tiny.target.parent / "no-other-draft"))
    lesson = load_lesson(None, frozenset(DEMOS))
    keeper = ModelKeeper(Settings(
        ModelOptions(target=str(tiny.target), draft=str(tiny.draft), n_ctx=1024, threads=1),
        DraftOptions(policy="fixed", k=3), SamplingOptions(max_tokens=48)))
    engine = keeper.load()
    try:
        recs = LiveRecordings(keeper, engine, lesson.prompts, 48)
        demos = {name: run_demo(name, recs, STYLES) for name in DEMOS}
        # `r` on a step makes its recordings again, and only those: the steps showing the same
        # round keep showing one
        code, edit = demos["acceptance"].uses, demos["ngram"].uses
        assert ("rec", "code", "draft") in code and ("rec", "edit", "ngram") in edit
        assert ("rec", "code", "draft") in demos["verify_curve"].uses and not code & edit
        shown = recs.recording("code")
        recs.forget(edit)
        assert recs.recording("code") is shown
        recs.forget(code)
        assert recs.recording("code") is not shown
    finally:
        engine.close()
    checks = _checked(demos)
    assert len(checks) >= 6
    assert all(c.agrees for c in checks), "\n".join(c.line() for c in checks if not c.agrees)
    assert any(s.startswith("generated here now: tiny-target") for s in demos["verify"].sources)
    console = Console(width=200, record=True)
    console.print(demos["draft_choice"].body)  # a live row beside a shipped trace's says so
    assert "one row is a shipped trace, recorded on another machine" in console.export_text()
