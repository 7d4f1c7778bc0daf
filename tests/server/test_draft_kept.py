"""patches/llama.cpp/0007: llama-server's draft-simple keeps the tokens drafting decoded instead
of evaluating the verified batch on the draft again, and leaves the last drafted token to the
next draft. Its draft must propose what a draft that reads every token proposes: round for
round the server's verdicts are those of specchat's own engine on the same tiny pair (greedy,
k=3, every draft kept); replies drafted at once in two slots equal each one drafted alone."""

from __future__ import annotations

import threading

import numpy as np
from support.models import GREEDY, load
from support.processes import LlamaServer, whole_reply

from specchat.chat.session import ChatSession
from specchat.engine.events import Event, RoundEvent, TurnEvent
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.loading import load_drafter
from specchat.server.client import ServerClient
from specchat.server.session import ServerSession
from specchat.server.verdicts import UNKNOWN_ID
from specchat.settings import ModelOptions

PROMPTS = ["count from one to twenty: one two three", "the quick brown fox jumps over the lazy dog"]
TOKENS = 60


def _rounds(events: list[Event]) -> list[tuple[int, int]]:
    """(drafted, accepted) of every round that drafted."""
    return [(e.drafted, e.accepted) for e in events if isinstance(e, RoundEvent) and e.drafted]


def _totals(rounds: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Drafted and accepted tokens after each round."""
    out, drafted, accepted = [], 0, 0
    for d, a in rounds:
        drafted, accepted = drafted + d, accepted + a
        out.append((drafted, accepted))
    return out


def _served(url: str, text: str) -> list[Event]:
    session = ServerSession(ServerClient(url), GREEDY)
    return list(session.turn(text, GenerationSettings(max_tokens=TOKENS)))


def test_the_servers_draft_proposes_what_a_draft_reading_every_token_proposes(spec_server, tiny):
    target = load(tiny.target)
    drafter = load_drafter(str(tiny.draft), target, GREEDY, np.random.default_rng(0),
                           ModelOptions(n_ctx=1024, threads=1))
    engine = SpeculativeEngine(target, drafter, GREEDY, DraftSettings(k=3))
    try:
        for text in PROMPTS:
            engine.clear_caches()
            local = list(ChatSession(engine).turn(text, GenerationSettings(max_tokens=TOKENS)))
            served = _served(spec_server.url, text)
            whole, stop, _ = whole_reply(ServerClient(spec_server.url),
                                         local[-1].prompt_token_ids, GREEDY, TOKENS, 0)
            assert (whole, stop) == (local[-1].token_ids, local[-1].stop_reason)
            # the stream names a token the server held back (half a character) by count only
            streamed = served[-1].token_ids
            assert len(streamed) == len(whole) and all(
                a in (b, UNKNOWN_ID) for a, b in zip(streamed, whole))
            # a round whose tokens the server held back comes with the next one: compare the running
            # totals at the server's rounds with the local ones
            totals = _totals(_rounds(served))
            assert len(totals) > 10 and totals[-1] == _totals(_rounds(local))[-1]
            assert set(totals) <= set(_totals(_rounds(local)))
    finally:
        engine.close()


def test_replies_drafted_at_once_in_two_slots_equal_each_drafted_alone(server_binary, tiny,
                                                                       tmp_path):
    server = LlamaServer(server_binary, tiny.target, tiny.draft, slots=2,
                         log=tmp_path / "llama-server.log")
    try:
        alone = {text: _served(server.url, text)[-1] for text in PROMPTS}
        together: dict[str, TurnEvent] = {}

        def reply(text: str) -> None:
            last = _served(server.url, text)[-1]
            assert isinstance(last, TurnEvent)
            together[text] = last
        threads = [threading.Thread(target=reply, args=(text,)) for text in PROMPTS]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for text in PROMPTS:
            assert together[text].token_ids == alone[text].token_ids
            assert together[text].counts.n_drafted == alone[text].counts.n_drafted
            assert together[text].counts.n_accepted == alone[text].counts.n_accepted
    finally:
        server.stop()
