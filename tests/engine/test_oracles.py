"""The greedy oracle catches what it claims. Mutants of a real target-only reply (one token short,
one token long, a wrong token where the target was sure, the same tokens with another stop
reason) and an engine that drops the last token of every speculative reply fail it; the reply
itself, and one that parts from it where the target-only run had a near-tie, pass it. The
sampling oracle's mutant (a verifier that ignores the p/q rule) is test_engine's and
test_verify's "wrong rule" control."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from support.checks import (
    NEAR_TIE_CEILING,
    assert_same_up_to_a_near_tie,
    check_greedy_rule,
    make_drafter,
    target_only_rows,
)
from support.models import GREEDY, prompt_ids, run

from specchat.engine.drafters import NoDrafter
from specchat.engine.events import TokenEvent
from specchat.engine.loop import SpeculativeEngine

PROMPT = "the cat sat on"


@pytest.fixture(scope="module")
def plain(models):
    """A target-only reply: its events, its turn and the rows its target computed."""
    target, _ = models
    rows = target.record()
    events, turn = run(SpeculativeEngine(target, NoDrafter(), GREEDY), prompt_ids(target, PROMPT),
                       max_tokens=24)
    assert turn.stop_reason == "max_tokens" and turn.n_tokens >= 24  # or a character more
    return events, turn, dict(rows)


def gaps(events) -> dict[int, float]:
    return {e.position: e.logit_gap for e in events if isinstance(e, TokenEvent)}


def with_token(turn, at: int, token: int):
    ids = list(turn.token_ids)
    ids[at] = token
    return replace(turn, token_ids=ids)


def test_the_reply_itself_passes(plain):
    events, turn, rows = plain
    assert_same_up_to_a_near_tie(events, turn, 0.0, rows)


@pytest.mark.parametrize("mutant", ["one token short", "one token long", "another stop reason"])
def test_a_mutant_reply_fails(plain, mutant):
    events, turn, rows = plain
    other = {
        "one token short": replace(turn, token_ids=turn.token_ids[:-1], n_tokens=turn.n_tokens - 1),
        "one token long": replace(turn, token_ids=[*turn.token_ids, turn.token_ids[-1]],
                                  n_tokens=turn.n_tokens + 1),
        "another stop reason": replace(turn, stop_reason="eos"),
    }[mutant]
    with pytest.raises(AssertionError):
        assert_same_up_to_a_near_tie(events, other, 0.0, rows)


def test_a_wrong_token_where_the_target_was_sure_fails_and_at_a_near_tie_passes(plain):
    events, turn, rows = plain
    by_gap = sorted(gaps(events).items(), key=lambda kv: kv[1])
    (tie_at, tie_gap), (sure_at, sure_gap) = by_gap[0], by_gap[-1]
    assert tie_gap < sure_gap
    threshold = (tie_gap + sure_gap) / 2
    other_token = (turn.token_ids[sure_at] + 1) % 200 + 3
    with pytest.raises(AssertionError, match="above the near-tie threshold"):
        assert_same_up_to_a_near_tie(events, with_token(turn, sure_at, other_token), threshold, rows)
    # past the first parting the replies may differ in anything
    parted = with_token(turn, tie_at, (turn.token_ids[tie_at] + 1) % 200 + 3)
    if tie_gap <= NEAR_TIE_CEILING:
        assert_same_up_to_a_near_tie(events, parted, threshold, rows)


def test_the_near_tie_threshold_never_rises_above_its_ceiling(plain):
    events, turn, rows = plain
    sure_at, sure_gap = max(gaps(events).items(), key=lambda kv: kv[1])
    assert sure_gap > NEAR_TIE_CEILING, "the tiny target has no confident token to test with"
    wrong = with_token(turn, sure_at, (turn.token_ids[sure_at] + 1) % 200 + 3)
    with pytest.raises(AssertionError):
        assert_same_up_to_a_near_tie(events, wrong, 10 * sure_gap, rows)


def test_an_engine_that_drops_the_last_token_fails_the_greedy_rule(models, monkeypatch):
    """The mutant that passed every greedy test before the oracle compared lengths."""
    target, draft = models
    generate = SpeculativeEngine.generate

    def one_short(self, *args, **kwargs):
        events = list(generate(self, *args, **kwargs))
        if not isinstance(self.drafter, NoDrafter):
            turn = events[-1]
            events[-1] = replace(turn, token_ids=turn.token_ids[:-1], n_tokens=turn.n_tokens - 1)
        yield from events

    monkeypatch.setattr(SpeculativeEngine, "generate", one_short)
    with pytest.raises(AssertionError):
        check_greedy_rule(target, make_drafter("model", draft), prompt_ids(target, PROMPT), k=3,
                          adaptive=False, near_tie=0.0)


def test_a_finished_turn_alone_is_judged_by_the_rows_target_only_computed(plain, models):
    """The app keeps only a reply's finished turn: its judge rebuilds the target-only rows
    (tests/tui's swapped-draft test). They are the run's own rows, and a reply one token short
    or long fails by them."""
    events, turn, rows = plain
    target, _ = models
    rebuilt = target_only_rows(target, turn)
    assert rebuilt.keys() == rows.keys()
    assert all(np.array_equal(rebuilt[at], rows[at]) for at in rows)
    assert_same_up_to_a_near_tie([turn], turn, 0.0, rebuilt)
    for other in (replace(turn, token_ids=turn.token_ids[:-1], n_tokens=turn.n_tokens - 1),
                  replace(turn, token_ids=[*turn.token_ids, 5], n_tokens=turn.n_tokens + 1)):
        with pytest.raises(AssertionError):
            assert_same_up_to_a_near_tie([turn], other, 0.0, rebuilt)
