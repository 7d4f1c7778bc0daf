"""Reading a message while it is typed, and a draft catching up after a reply: both off the
reply's clock, neither changing a token, the caches rolled back where the message is edited."""

from __future__ import annotations

import numpy as np
from support.models import GREEDY, load

from specchat.chat.session import ChatSession
from specchat.engine import kvsync
from specchat.engine.events import TurnEvent
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.model_drafter import ModelDrafter
from specchat.engine.policy import PolicyKind

MESSAGE = "the cat sat on the mat and then the cat sat on the hat"


def engine_of(tiny, policy: PolicyKind = PolicyKind.FIXED) -> SpeculativeEngine:
    target, draft = load(tiny.target), load(tiny.draft)
    rng = np.random.default_rng(0)
    return SpeculativeEngine(target, ModelDrafter(draft, GREEDY, rng), GREEDY,
                             DraftSettings(k=3, policy_kind=policy), rng)


def reply(session: ChatSession, text: str) -> TurnEvent:
    events = list(session.turn(text, GenerationSettings(max_tokens=16)))
    assert isinstance(events[-1], TurnEvent)
    return events[-1]


def test_a_message_read_while_typed_gets_the_same_reply_with_less_to_read_after_enter(tiny):
    typed = ChatSession(engine_of(tiny))
    for n in [*range(5, len(MESSAGE), 7), len(MESSAGE)]:  # as the message grows
        typed.read_ahead(MESSAGE[:n], 16)
    target = typed.engine.target
    prompt = typed.prompt(MESSAGE, 16).prompt_ids
    cached = kvsync.common_prefix(target.tokens, prompt)
    # Enter leaves the message's last few tokens to read, and the template's after it
    assert cached >= len(target.tokenize(MESSAGE, special=False)) - 3
    assert kvsync.common_prefix(typed.engine.drafter.model.tokens, prompt) == cached
    with_reading = reply(typed, MESSAGE)
    without = reply(ChatSession(engine_of(tiny)), MESSAGE)
    assert with_reading.token_ids == without.token_ids
    c = with_reading.counts
    assert c.typed_ahead_tokens == cached and c.typed_ahead_s > 0
    assert c.ttft_unread_s == c.ttft_s + c.typed_ahead_s
    assert without.counts.typed_ahead_tokens == 0 and without.counts.ttft_unread_s is None


def test_an_edited_message_rolls_the_caches_back_and_counts_only_the_reads_it_kept(tiny):
    session = ChatSession(engine_of(tiny))
    engine = session.engine
    session.read_ahead("the dog barked at the postman all morning long", 16)
    dog = list(engine.target.tokens)
    session.read_ahead(MESSAGE, 16)  # the text replaced: back to the common prefix, then on
    prompt = session.prompt(MESSAGE, 16).prompt_ids
    now = list(engine.target.tokens)
    assert now == prompt[:len(now)] and dog != prompt[:len(dog)]
    for model in (engine.target, engine.drafter.model):
        assert list(model.tokens) == now
    turn = reply(session, MESSAGE)
    assert turn.counts.typed_ahead_tokens == len(now) - kvsync.common_prefix(dog, now)


def test_a_draft_that_sat_out_a_reply_catches_up_after_it(tiny):
    """A draft swapped in after a reply has read none of it: `catch_up` reads it all but the
    last token, once."""
    engine = engine_of(tiny)
    reply(ChatSession(engine), MESSAGE)
    engine.use_drafter(ModelDrafter(load(tiny.draft), GREEDY, engine.rng))
    draft = engine.drafter.model
    assert engine.catch_up() == len(engine.last_ids) - 1
    assert list(draft.tokens) == engine.last_ids[:-1]
    assert engine.catch_up() == 0


def test_a_message_sent_other_than_it_was_read_counts_no_read_it_did_not_keep(tiny):
    """Read as one text, sent as another (the box cleared and retyped faster than a read):
    the read the prompt did not keep whole is not counted as saved."""
    session = ChatSession(engine_of(tiny))
    session.read_ahead("the dog barked at the postman all morning long", 16)
    turn = reply(session, MESSAGE)
    assert turn.counts.typed_ahead_tokens == 0 and turn.counts.ttft_unread_s is None
