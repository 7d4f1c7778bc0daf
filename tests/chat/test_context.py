"""Conversations longer than the context: the context policy, on tiny real models (llama.cpp;
the transformers half is in test_hf_backend.py), and the rule that picks what is left out."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from support.checks import calibrated_near_tie, check_long_conversation, check_reply_makes_room, short_history
from support.models import GREEDY, load

from specchat.chat import context
from specchat.chat.session import ChatSession, Conversation
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import ContextEvent, TurnEvent
from specchat.engine.loop import GenerationSettings, SpeculativeEngine
from specchat.errors import ContextOverflowError
from specchat.render import TerminalRenderer

N_CTX = 256


@pytest.fixture(scope="module")
def small(tiny):
    """The tiny pair with a 256-token context."""
    target, draft = load(tiny.target, n_ctx=N_CTX), load(tiny.draft, n_ctx=N_CTX)
    yield target, draft
    target.close()
    draft.close()


@pytest.fixture(scope="module")
def near_tie(small) -> float:
    return calibrated_near_tie(small[0], floor=1e-3)


@pytest.mark.parametrize("policy", ["rolling", "truncate-middle"])
def test_a_conversation_three_contexts_long_keeps_answering(small, near_tie, policy):
    events = check_long_conversation(*small, policy, near_tie)
    assert events and all(not e.during_reply and e.left_out > 0 for e in events)


def test_stop_refuses_the_turn_that_does_not_fit_and_says_what_to_do(small):
    session = ChatSession(SpeculativeEngine(small[0], NoDrafter(), GREEDY), context_policy="stop")
    with pytest.raises(ContextOverflowError, match="--context-policy rolling"):
        for text in ["a question", "another one", "and a third", "and a fourth"]:
            list(session.turn(text, GenerationSettings(max_tokens=40)))
    assert len(session.conversation.messages) >= 2  # the turns that fitted are kept


def test_a_reply_that_reaches_the_end_of_the_context_makes_room_and_goes_on(small, near_tie):
    check_reply_makes_room(*small, near_tie)


@pytest.mark.parametrize("during_reply", [False, True])
def test_the_terminal_says_what_was_left_out(during_reply):
    out, err = io.StringIO(), io.StringIO()
    render = TerminalRenderer(Console(file=out), Console(file=err, width=300))
    render(ContextEvent(2, 180, during_reply, 200, 1.5))
    line = err.getvalue().strip()
    assert line.startswith("[") and "2 earlier turns left out of the model's view" in line
    assert ("re-evaluated 200 tokens in 1.50 s" in line) == during_reply


def test_stop_ends_a_reply_at_the_end_of_the_context(small):
    session = ChatSession(SpeculativeEngine(small[0], NoDrafter(), GREEDY),
                          Conversation(messages=short_history(8)), "stop")
    turn = list(session.turn("write a long answer", GenerationSettings(max_tokens=150)))[-1]
    assert isinstance(turn, TurnEvent)
    assert turn.stop_reason == "context_full" and turn.counts.context_shifts == 0


# -- the rule, for any conversation --------------------------------------------------------------


def render(messages) -> list[int]:
    """A stand-in template: one token per character, four per message for its frame."""
    return [0] * sum(4 + len(text) for _, text in messages)


TURNS = st.lists(st.tuples(st.text(max_size=40), st.text(max_size=80)), max_size=12)


@settings(max_examples=300)
@given(turns=TURNS, user=st.text(max_size=60), system=st.none() | st.text(max_size=30),
       n_ctx=st.integers(16, 400), max_tokens=st.integers(1, 200),
       policy=st.sampled_from(context.POLICIES))
def test_the_prompt_keeps_the_system_the_new_message_and_the_newest_turns(
        turns, user, system, n_ctx, max_tokens, policy):
    history = [m for q, a in turns for m in (("user", q), ("assistant", a))]
    try:
        fitted = context.first_prompt(render, system, history, user, n_ctx=n_ctx, policy=policy,
                                    max_tokens=max_tokens)
    except ContextOverflowError as exc:
        assert str(exc).count("\n") == 0
        head = 4 + len(system) if system else 0
        whole = head + sum(8 + len(q) + len(a) for q, a in turns) + 4 + len(user)
        assert (head + 4 + len(user) >= n_ctx) or (policy == "stop" and whole >= n_ctx)
        return
    assert len(fitted.prompt_ids) < n_ctx
    order = context.drop_order(policy, len(turns))
    kept = [t for i, t in enumerate(turns) if i not in set(order[:fitted.left_out])]
    head = [("system", system)] if system else []
    expected = render(head + [m for q, a in kept for m in (("user", q), ("assistant", a))]
                      + [("user", user)])
    assert fitted.prompt_ids == expected
    if policy == "stop":
        assert fitted.left_out == 0
    if policy == "rolling":  # what is left is the newest turns
        assert kept == turns[fitted.left_out:]
    if policy == "truncate-middle" and kept:  # the first turn goes last
        assert kept[0] == turns[0] and kept[1:] == turns[len(turns) - len(kept) + 1:]
    if fitted.left_out:  # nothing more was left out than the reply's reserve needs
        fewer = [t for i, t in enumerate(turns) if i not in set(order[:fitted.left_out - 1])]
        one_less = render(head + [m for q, a in fewer for m in (("user", q), ("assistant", a))]
                          + [("user", user)])
        assert len(one_less) + context.reserve(n_ctx, max_tokens) > n_ctx
