"""Every speedup with its uncertainty: a bootstrap of the turn's rounds and its baseline steps,
on real turns of the tiny pair, and the words a reply gets when the interval holds 1.0."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.models import GREEDY, prompt_ids

from specchat.engine.events import turn_of
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.model_drafter import ModelDrafter
from specchat.engine.stats import paired_speedup_interval, speedup_interval
from specchat.wording import slower_why, speedup_words


def test_the_interval_narrows_to_the_point_when_nothing_varies_and_holds_it_when_it_does():
    steady = speedup_interval([(3, 0.1)] * 8, [0.04] * 4)
    assert steady == (pytest.approx(1.2), pytest.approx(1.2))
    rng = np.random.default_rng(1)
    spans = [(int(t), float(s)) for t, s in zip(rng.integers(1, 5, 30), rng.uniform(0.05, 0.2, 30))]
    steps = list(rng.uniform(0.03, 0.05, 6))
    low, high = speedup_interval(spans, steps)
    point = sum(t for t, _ in spans) / sum(s for _, s in spans) * float(np.median(steps))
    assert low < point < high
    assert speedup_interval(spans[:1], steps) == (None, None)  # nothing to spread
    assert speedup_interval(spans, steps[:1]) == (None, None)


@given(st.lists(st.tuples(st.integers(1, 200), st.floats(0.01, 50)), min_size=2, max_size=30),
       st.floats(0.1, 10))
def test_a_suite_whose_every_prompt_ran_f_times_faster_has_the_interval_f_to_f(base, f):
    """Each resample pairs a prompt with its own target-only run, so a constant ratio has no
    spread: the interval is the point, whatever the prompts' lengths and times."""
    arm = [(tokens, seconds / f) for tokens, seconds in base]
    low, high = paired_speedup_interval(arm, base)
    assert low == pytest.approx(f) and high == pytest.approx(f)


def test_a_suite_interval_spreads_with_the_prompts_and_needs_two_of_them():
    base = [(40, 4.0), (40, 4.0), (40, 4.0), (40, 4.0)]
    arm = [(40, 2.0), (40, 4.0), (40, 8.0), (40, 3.0)]
    low, high = paired_speedup_interval(arm, base)
    point = 160 / 17 / 10  # the arm's total rate over the base's
    assert low < point < high and high - low > 0.3
    assert paired_speedup_interval(arm[:1], base[:1]) == (None, None)


@pytest.mark.parametrize("text", ["hello world", "the cat sat on", "speculative decoding"])
def test_every_speculative_turn_reports_its_interval_from_all_its_baseline_steps(models, text):
    target, draft = models
    engine = SpeculativeEngine(target, ModelDrafter(draft, GREEDY, np.random.default_rng(0)),
                               GREEDY, DraftSettings(k=3))
    turn = turn_of(engine.generate(prompt_ids(target, text),
                                   GenerationSettings(max_tokens=64, baseline_steps=6)))
    # all six steps are timed, past an end of generation too
    assert turn.counts.baseline_source.startswith("6 target-only steps at depth")
    if turn.counts.rounds <= 2:  # one decoded round or none: nothing to resample, no interval
        assert turn.counts.speedup_low is None and turn.counts.speedup_high is None
        assert speedup_words(turn).startswith(f"{turn.counts.speedup:.2f}x")
    else:  # a percentile bootstrap need not hold the point itself: only its own order
        assert turn.counts.speedup_low is not None and turn.counts.speedup_high is not None
        assert 0 < turn.counts.speedup_low <= turn.counts.speedup_high
        words = speedup_words(turn)
        if turn.counts.speedup_low <= 1.0 <= turn.counts.speedup_high:
            assert words.startswith("about the same as target-only")
            assert slower_why(turn).startswith(" · about the same")
        else:
            assert words.startswith(f"{turn.counts.speedup:.2f}x (95%: ")


class EndsAtOnce:
    """A real backend whose every token ends the reply, so the baseline starts after an end."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def is_eog(self, token: int) -> bool:
        return True

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def test_the_baseline_times_every_step_past_an_end_of_generation(models):
    target, draft = models
    ending = EndsAtOnce(target)
    engine = SpeculativeEngine(ending, ModelDrafter(draft, GREEDY, np.random.default_rng(0)),
                               GREEDY, DraftSettings(k=3))
    turn = turn_of(engine.generate(prompt_ids(target, "hello world"),
                                   GenerationSettings(max_tokens=64, baseline_steps=6)))
    assert turn.stop_reason == "eos" and turn.counts.n_tokens == 0
    assert turn.counts.baseline_source.startswith("6 target-only steps")  # one, before: it stopped
