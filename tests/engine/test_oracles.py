"""The greedy oracle catches what it claims. Mutants of a real target-only reply (one token short,
one token long, a wrong token where the target was sure, the same tokens with another stop
reason) and an engine that drops the last token of every speculative reply fail it, each with
its own message, where the same test passes the reply and the engine as built; a parting at a
near-tie the test makes itself (the row rebuilt with its top two logits close) passes it. The
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
from specchat.engine.policy import PolicyKind

PROMPT = "the cat sat on"


@pytest.fixture(scope="module")
def plain(models):
    """A target-only reply: its events, its turn and the rows its target computed."""
    target, _ = models
    rows = target.record()
    events, turn = run(SpeculativeEngine(target, NoDrafter(), GREEDY), prompt_ids(target, PROMPT),
                       max_tokens=24)
    assert turn.stop_reason == "max_tokens" and turn.counts.n_tokens >= 24  # or a character more
    return events, turn, dict(rows)


def gaps(events) -> dict[int, float]:
    return {e.position: e.logit_gap for e in events if isinstance(e, TokenEvent)}


def with_ids(turn, ids: list[int]):
    """The turn with other tokens, counted."""
    return replace(turn, token_ids=ids, counts=replace(turn.counts, n_tokens=len(ids)))


def with_token(turn, at: int, token: int):
    ids = list(turn.token_ids)
    ids[at] = token
    return replace(turn, token_ids=ids)


def test_the_reply_itself_passes(plain):
    events, turn, rows = plain
    assert_same_up_to_a_near_tie(events, turn, 0.0, rows)


MUTANTS = {"one token short": "above the near-tie threshold",
           "one token long": "where target-only stopped at max_tokens after",
           "another stop reason": "stopped for 'eos' where target-only stopped for"}
"""Each mutant reply and the oracle's own message for it."""


@pytest.mark.parametrize("mutant", ["as built", *MUTANTS])
def test_a_mutant_reply_fails_with_its_own_message(plain, mutant):
    events, turn, rows = plain
    other = {
        "as built": turn,
        "one token short": with_ids(turn, turn.token_ids[:-1]),
        "one token long": with_ids(turn, [*turn.token_ids, turn.token_ids[-1]]),
        "another stop reason": replace(turn, stop_reason="eos"),
    }[mutant]
    if mutant == "as built":
        assert assert_same_up_to_a_near_tie(events, other, 0.0, rows) is None
        return
    with pytest.raises(AssertionError, match=MUTANTS[mutant]):
        assert_same_up_to_a_near_tie(events, other, 0.0, rows)


def near_tie_rows(rows: dict[int, np.ndarray], at: int, gap: float) -> dict[int, np.ndarray]:
    """`rows` with the row at absolute position `at` rebuilt so its top two logits are `gap`
    apart: a near-tie made, not hoped for."""
    out = dict(rows)
    row = rows[at].copy()
    order = np.argsort(row)
    row[order[-2]] = row[order[-1]] - gap
    out[at] = row
    return out


@pytest.mark.parametrize("gap", [0.0004, 0.5])
def test_a_parting_passes_at_a_near_tie_and_fails_where_the_target_was_sure(plain, gap):
    """The reply parts at its middle token; the target-only row there is made a near-tie
    (gap 0.0004, under the threshold 0.001) or a sure choice (gap 0.5): the oracle passes the
    first, fails the second with its own message, and past the parting the replies may
    differ in anything."""
    _, turn, rows = plain
    at = turn.counts.n_tokens // 2
    position = len(turn.prompt_token_ids) + at
    judged = near_tie_rows(rows, position, gap)
    other = [t + 1 if t < 200 else t - 1 for t in turn.token_ids]
    parted = replace(turn, token_ids=turn.token_ids[:at] + other[at:])
    if gap < 0.001:
        assert assert_same_up_to_a_near_tie([turn], parted, 0.001, judged) == (
            at, pytest.approx(gap, abs=1e-6))
        return
    with pytest.raises(AssertionError, match=f"part at {at} where target-only's top-2 gap is 0.5000"):
        assert_same_up_to_a_near_tie([turn], parted, 0.001, judged)


@pytest.mark.parametrize("threshold", [0.001, 10.0])
def test_the_near_tie_threshold_never_rises_above_its_ceiling(plain, threshold):
    """A parting where the target-only gap is 0.5: it fails at a threshold of 0.001 and at
    one of 10, which the oracle caps at NEAR_TIE_CEILING."""
    _, turn, rows = plain
    at = turn.counts.n_tokens // 2
    judged = near_tie_rows(rows, len(turn.prompt_token_ids) + at, 0.5)
    wrong = with_token(turn, at, (turn.token_ids[at] + 1) % 200 + 3)
    with pytest.raises(AssertionError, match=f"above the near-tie threshold {NEAR_TIE_CEILING:.4f}"
                       if threshold > NEAR_TIE_CEILING else "above the near-tie threshold 0.0010"):
        assert_same_up_to_a_near_tie([turn], wrong, threshold, judged)


@pytest.mark.parametrize("engine", ["as built", "drops the last token"])
def test_an_engine_that_drops_the_last_token_fails_the_greedy_rule(models, monkeypatch, engine):
    """The mutant that passed every greedy test before the oracle compared lengths; the same
    check passes the engine as built."""
    target, draft = models
    generate = SpeculativeEngine.generate

    def one_short(self, *args, **kwargs):
        events = list(generate(self, *args, **kwargs))
        if not isinstance(self.drafter, NoDrafter):
            turn = events[-1]
            events[-1] = with_ids(turn, turn.token_ids[:-1])
        yield from events

    def check() -> None:
        check_greedy_rule(target, make_drafter("model", draft), prompt_ids(target, PROMPT), k=3,
                          policy=PolicyKind.FIXED, near_tie=0.0)

    if engine == "as built":
        check()
        return
    monkeypatch.setattr(SpeculativeEngine, "generate", one_short)
    with pytest.raises(AssertionError, match="above the near-tie threshold"):
        check()


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
    for other, message in (
            (with_ids(turn, turn.token_ids[:-1]), "above the near-tie threshold"),
            (with_ids(turn, [*turn.token_ids, 5]), "where target-only stopped at max_tokens after")):
        with pytest.raises(AssertionError, match=message):
            assert_same_up_to_a_near_tie([turn], other, 0.0, rebuilt)
