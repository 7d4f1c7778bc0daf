"""The demonstrations on the shipped traces: each figure they print is the one the recorded
events give, the sampling step's histogram tells the p/q rule from a wrong one, and the gaps
users feel add up to the reply's time."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.style import Style

from specchat.engine.events import RoundEvent, TokenKind, TurnEvent
from specchat.engine.verify import Verdict
from specchat.lesson import demos
from specchat.lesson.demos import DEMOS, chi_square, chi_square_line, gaps_s, run_demo
from specchat.lesson.recordings import TraceRecordings
from specchat.trace import read_trace

STYLES = {kind: Style() for kind in TokenKind}


def _text(name: str) -> str:
    return _shown(run_demo(name, TraceRecordings(), STYLES))


def _shown(demo) -> str:
    console = Console(width=140, record=True, file=None)
    with console.capture() as capture:
        console.print(demo.body)
        for source in demo.sources:
            console.print(source)
    return capture.get()


@pytest.mark.parametrize("name", list(DEMOS))
def test_every_demo_runs_on_the_shipped_traces_and_says_so(name):
    assert "shipped" in _text(name) or "sampling-rows.json" in _text(name)


def _turn(name: str) -> TurnEvent:
    last = read_trace(name).events[-1]
    assert isinstance(last, TurnEvent)
    return last


def test_the_race_figures_are_the_recorded_rates_ratio():
    text = _text("prose_vs_code")
    for kind in ("code", "prose"):
        plain, spec = _turn(f"{kind}-target-only"), _turn(f"{kind}-0.5b-draft-k3")
        ratio = spec.counts.tokens_per_second / plain.counts.tokens_per_second
        row = next(line for line in text.splitlines() if line.strip().startswith(kind))
        assert f"{plain.counts.tokens_per_second:.1f} tok/s" in row and f"{ratio:.2f}x" in row


def test_the_cache_step_keeps_the_context_and_the_drafts_that_stood():
    text = _text("cache")
    rnd = int(re.search(r"round (\d+): the context is (\d+) tokens", text).group(1))
    context = int(re.search(r"the context is (\d+) tokens", text).group(1))
    events = read_trace("code-0.5b-draft-k3").events
    (round_event,) = [e for e in events if isinstance(e, RoundEvent) and e.round == rnd]
    assert 0 < round_event.accepted < round_event.drafted
    held = int(re.search(r"the cache holds (\d+) tokens", text).group(1))
    cut = int(re.search(r"(\d+) rows cut back", text).group(1))
    assert held == context + round_event.accepted
    assert cut == round_event.drafted - round_event.accepted


def test_draft_tokens_after_the_first_refusal_are_dropped_not_refused():
    text = _text("verify")
    verdicts = [line for line in text.splitlines() if "refused" in line or "dropped" in line]
    assert "refused" in verdicts[0] and all("dropped" in v for v in verdicts[1:]) and len(verdicts) > 1


@pytest.mark.parametrize("df", [1, 2, 4, 8, 16])
def test_the_lines_false_alarm_is_at_most_what_the_slide_says(df):
    """At or just above the chi-square table's 99.9th percentile: draws that follow p cross
    it one time in a thousand or less."""
    from scipy.stats import chi2

    table = chi2.ppf(1 - demos.FALSE_ALARM, df)
    assert table <= chi_square_line(df) <= table + 0.4


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.lists(st.floats(0.05, 1.0), min_size=2, max_size=6),
       st.lists(st.floats(0.05, 1.0), min_size=2, max_size=6), st.integers(0, 2**31))
def test_speculative_draws_follow_p_whatever_the_draft(p_raw, q_raw, seed):
    n = min(len(p_raw), len(q_raw))
    p = np.array(p_raw[:n]) / sum(p_raw[:n])
    q = np.array(q_raw[:n]) / sum(q_raw[:n])
    drawn, _ = demos.speculative_samples(p, q, 3000, np.random.default_rng(seed))
    stat, df = chi_square(np.bincount(drawn, minlength=n), p)
    assert stat < chi_square_line(df) + 10  # a 0.1% line and room for 25 examples


def _seeded_sampling(seed: int) -> str:
    return _shown(demos.sampling(TraceRecordings(), STYLES, np.random.default_rng(seed)))


@pytest.mark.parametrize("rule", ["p/q rule", "keeps every draft"])
def test_the_sampling_step_tells_a_wrong_rule_from_the_p_q_rule(monkeypatch, rule):
    """Seeded draws (unseeded, the p/q rule's verdict is wrong one time in a thousand, as the
    slide says); the line and its false-alarm chance are on the slide."""
    if rule == "keeps every draft":
        monkeypatch.setattr(demos, "verify_sampling",
                            lambda draft, q_dists, p_dists, rng: Verdict(len(draft), 0, [0.0]))
    shown = " ".join(_seeded_sampling(0).split())  # as read, whatever the wrapping
    assert "the 0.1% line" in shown and "one time in 1,000" in shown
    assert ("NOT consistent with p" in shown) == (rule == "keeps every draft")
    assert "consistent with p" in shown


def test_the_gaps_users_feel_add_up_to_the_reply_after_its_first_token():
    for name in ("prose-0.5b-draft-k3", "prose-target-only"):
        events = read_trace(name).events
        rounds = [e for e in events if isinstance(e, RoundEvent)]
        gaps = gaps_s(events)
        assert len(gaps) == sum(r.emitted for r in rounds[1:])
        assert sum(gaps) == pytest.approx(rounds[-1].t_s - rounds[0].t_s)
