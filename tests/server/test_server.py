"""specchat as a client of a real llama-server on the tiny pair: the server's replies arrive as
the same event stream a local turn emits, every verdict accounted for by the server's own
counters; a stopped reply stops the server; a server that is down is named in one line."""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest
from support import modes
from support.checks import (
    MODE_FIGURES,
    MODE_PROMPT,
    assert_same_up_to_a_near_tie,
    calibrated_near_tie,
    expected_triples,
    judge_triples,
)
from support.models import GREEDY, load, prompt_ids, run
from support.pilot import SIZE, make_app, ready, run_async, say
from support.processes import LlamaServer, history_path, specchat, whole_reply
from support.tinymodels import TinySpec, write_tiny_gguf

from specchat.chat.history import HistoryStore
from specchat.chat.session import ChatSession
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import RoundEvent, TokenEvent, TokenKind, TurnEvent
from specchat.engine.loop import GenerationSettings, SpeculativeEngine
from specchat.server.client import ServerClient, ServerError
from specchat.server.session import ServerSession
from specchat.server.verdicts import UNKNOWN_ID
from specchat.trace import read_trace
from specchat.ui.widgets.legend import Legend
from specchat.ui.widgets.stats_panel import StatsPanel

PROMPT = "count from one to twenty: one two three"


def server_turn(url: str, text: str = PROMPT, max_tokens: int = 40, cancel=None):
    session = ServerSession(ServerClient(url), GREEDY)
    settings = GenerationSettings(max_tokens=max_tokens, baseline_steps=4)
    return session, list(session.turn(text, settings, cancel))


def test_every_token_and_round_agrees_with_the_servers_own_counters(spec_server):
    session, events = server_turn(spec_server.url)
    turn = events[-1]
    assert isinstance(turn, TurnEvent) and turn.stop_reason == "max_tokens"
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    kept = [t for t in tokens if t.kind is not TokenKind.REJECTED]
    # the reply is every token that is not a rejected draft, in order
    assert "".join(t.text for t in kept) == turn.text and len(kept) == turn.counts.n_tokens == 40
    assert [t.position for t in kept] == list(range(40))
    # the server's counters, token by token, add up to its own final numbers
    assert turn.diagnostics.server is not None and turn.counts.n_tokens == turn.diagnostics.server["predicted_n"]
    assert turn.counts.n_drafted == turn.diagnostics.server["draft_n"] > 0
    assert turn.counts.n_accepted == turn.diagnostics.server["draft_n_accepted"]
    assert sum(t.kind is TokenKind.ACCEPTED for t in tokens) == turn.counts.n_accepted
    assert sum(t.kind is TokenKind.REJECTED for t in tokens) == turn.counts.n_drafted - turn.counts.n_accepted
    assert sum(r.emitted for r in rounds) == turn.counts.n_tokens and turn.counts.rounds == len(rounds)
    for r in rounds:  # a step: its accepted drafts, then the target's own token
        mine = [t for t in kept if t.round == r.round]
        assert [t.kind for t in mine[:-1]] == [TokenKind.ACCEPTED] * r.accepted
        ends = (TokenKind.TARGET if not r.drafted else
                TokenKind.BONUS if r.accepted == r.drafted else TokenKind.CORRECTED)
        assert mine[-1].kind is ends and r.emitted == r.accepted + 1
    assert session.conversation.messages == [("user", PROMPT), ("assistant", turn.text)]
    assert turn.counts.speedup is None and turn.counts.baseline_source.startswith(
        "not measured (give --baseline-server")


def test_the_speedup_is_measured_against_the_same_target_alone_on_a_second_server(
        spec_server, plain_server):
    session = ServerSession.connect(spec_server.url, plain_server.url, GREEDY)
    turn = list(session.turn(PROMPT, GenerationSettings(max_tokens=40, baseline_steps=6)))[-1]
    # the steps whose tokens arrived (a held-back token's arrival is not seen)
    steps, how = turn.counts.baseline_source.split(" ", 1)
    assert 1 <= int(steps) <= 6
    assert how == (f"target-only steps on {plain_server.url} at depth "
                   f"{len(turn.prompt_token_ids) + 40}")
    assert turn.counts.speedup == pytest.approx(turn.counts.tokens_per_second / turn.counts.baseline_tokens_per_second)
    assert session.conversation.messages[-1] == ("assistant", turn.text)  # its tokens not kept
    down = ServerSession.connect(spec_server.url, "http://127.0.0.1:9", GREEDY)
    turn = list(down.turn(PROMPT, GenerationSettings(max_tokens=8, baseline_steps=4)))[-1]
    assert turn.counts.n_tokens == 8 and turn.counts.speedup is None  # the reply stands without its speedup
    assert "http://127.0.0.1:9 is not answering" in turn.counts.baseline_source


def test_bench_runs_the_suite_on_the_server_beside_the_engine_here(spec_server, plain_server,
                                                                    tiny, tmp_path):
    out = tmp_path / "bench"
    proc = specchat("bench", "--server", spec_server.url, "--baseline-server", plain_server.url,
                    "--target", str(tiny.target), "--drafters", str(tiny.draft), "--k", "3",
                    "--categories", "short", "--max-tokens", "12", "--out", str(out),
                    tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "bench.json").read_text())
    arms = {r["arm"] for r in data["runs"]}
    assert arms == {"target only", "tiny-draft k=3", "llama-server (draft-simple)",
                    "llama-server, no draft"}
    prompts = {r["prompt"] for r in data["runs"]}
    assert len(data["runs"]) == 4 * len(prompts)
    served = [s for s in data["summary"] if s["arm"] == "llama-server (draft-simple)"]
    assert all(s["acceptance"] is not None and s["predicted_speedup"] is None for s in served)
    assert all(r["reported_speedup"] for r in data["runs"] if r["arm"].endswith("simple)"))


def test_a_streamed_reply_is_the_servers_whole_reply(spec_server, tiny):
    """The reply as the app streams it is the one the server makes: its length, its stop
    reason and every token it names equal the unstreamed reply's (which test_mode judges
    whole against target-only); a token the stream holds back (half a character) is the only
    one named by count, and there are few."""
    target = load(tiny.target)
    local = list(ChatSession(SpeculativeEngine(target, NoDrafter(), GREEDY)).turn(
        PROMPT, GenerationSettings(max_tokens=40)))
    target.close()
    _, events = server_turn(spec_server.url)
    streamed = events[-1]
    assert streamed.prompt_token_ids == local[-1].prompt_token_ids  # its template and tokens
    whole, stop, _ = whole_reply(ServerClient(spec_server.url), streamed.prompt_token_ids,
                                 GREEDY, 40, 0)
    assert (streamed.counts.n_tokens, streamed.stop_reason) == (len(whole), stop)
    named = [i for i, t in enumerate(streamed.token_ids) if t != UNKNOWN_ID]
    assert len(named) > len(whole) // 2
    assert [streamed.token_ids[i] for i in named] == [whole[i] for i in named]


def test_a_stopped_reply_keeps_what_came_and_the_server_answers_the_next(spec_server):
    cancel = threading.Event()
    session = ServerSession(ServerClient(spec_server.url), GREEDY)
    events = []
    for event in session.turn("tell me a long story", GenerationSettings(max_tokens=400), cancel):
        events.append(event)
        if isinstance(event, TokenEvent) and event.position == 5:
            cancel.set()
    turn = events[-1]
    assert turn.stop_reason == "cancelled" and 6 <= turn.counts.n_tokens < 400
    assert session.conversation.messages[-1] == ("assistant", turn.text)
    _, again = server_turn(spec_server.url, max_tokens=8)
    assert again[-1].counts.n_tokens == 8  # the slot was freed: the server is not still generating


def test_a_server_that_dies_mid_reply_is_named_and_the_conversation_is_kept(server_binary,
                                                                           tmp_path):
    model = tmp_path / "tiny-long.gguf"
    write_tiny_gguf(model, TinySpec(seed=0, n_ctx=65536))  # its replies run for a minute
    server = LlamaServer(server_binary, model, n_ctx=65536)
    try:
        session = ServerSession(ServerClient(server.url), GREEDY)
        seen = []
        with pytest.raises(ServerError, match="stopped answering mid-reply"):
            for event in session.turn("tell me everything", GenerationSettings(max_tokens=60000)):
                seen.append(event)
                if len(seen) == 5:
                    server.proc.kill()
        assert len(seen) >= 5 and session.conversation.messages == []  # no half entry
    finally:
        server.stop()


def test_ask_and_chat_with_server_and_a_server_that_is_down(spec_server, tmp_path):
    trace = tmp_path / "served.jsonl"
    proc = specchat("ask", PROMPT, "--server", spec_server.url, "--max-tokens", "12", "--json",
                    "--trace", str(trace), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"llama-server {spec_server.url}" in proc.stderr
    turn = json.loads(proc.stdout.splitlines()[-1])
    assert turn["type"] == "turn" and turn["n_tokens"] == 12 and "draft_n" in turn["server"]
    recorded = read_trace(trace)  # a server's turn replays like any other
    assert recorded.events[-1].diagnostics.server == turn["server"] and recorded.meta["draft"].startswith("server: ")
    chat = specchat("chat", "--server", spec_server.url, "--max-tokens", "8", tmp_path=tmp_path,
                    stdin="first\nsecond\n")
    assert chat.returncode == 0, chat.stderr
    assert chat.stderr.count("server's own: decode") == 2
    store = HistoryStore(history_path(tmp_path))
    (conversation,) = store.conversations()
    assert [m.role for m in store.messages(conversation.id)] == ["user", "assistant"] * 2
    assert conversation.target.startswith(spec_server.url)
    down = specchat("ask", "hi", "--server", "http://127.0.0.1:9", tmp_path=tmp_path)
    assert down.returncode == 2
    assert down.stderr.strip().splitlines()[-1] == (
        "specchat: error: llama-server at http://127.0.0.1:9 is not answering (Connection refused)")


def test_the_app_on_a_server_streams_counted_verdicts_and_says_whose_numbers(spec_server, tiny,
                                                                               tmp_path):
    app = make_app(tiny, tmp_path, max_tokens=16)
    app.settings.models.server = spec_server.url

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            screen = app.chat_screen
            assert f"llama-server {spec_server.url}" in screen.view.status_text
            assert "rejected draft (✗: count only)" in str(screen.query_one(Legend).render())
            await say(app, pilot, "hello there")
            turn = screen.transcript.last_turn
            assert turn.counts.n_tokens == 16 and turn.diagnostics.server is not None
            side = str(screen.query_one(StatsPanel).render())
            assert "the server's own" in side and "decode tok/s" in side
            await pilot.press("ctrl+d")  # its draft is the server's: the menu says why not
            await pilot.pause()
            assert any("set when it starts" in n.message for n in app._notifications)
    run_async(scenario)


def test_the_server_reads_the_message_while_it_is_typed_and_counts_what_the_prompt_kept(
        spec_server):
    """The server reads the typed message's prompt into its cache (a request that generates
    nothing); the turn counts the reads its prompt kept, by the server's own timings, and a
    message sent other than it was read counts none."""
    session = ServerSession(ServerClient(spec_server.url), GREEDY)
    settings = GenerationSettings(max_tokens=8, baseline_steps=0)
    message = "spell lighthouse backwards, then forwards"
    first = session.read_ahead(message[:20], 8)
    assert first > 0 and session.read_ahead(message[:20], 8) == 0  # nothing new: no request
    then = session.read_ahead(message, 8)
    assert then > 0
    turn = next(e for e in session.turn(message, settings) if isinstance(e, TurnEvent))
    assert turn.counts.typed_ahead_tokens == first + then  # what the server evaluated, kept
    assert turn.counts.typed_ahead_s > 0 and turn.counts.ttft_unread_s is not None
    assert turn.counts.typed_ahead_tokens <= turn.diagnostics.server["cache_n"]

    session.read_ahead("an altogether different message, read and never sent", 8)
    turn = next(e for e in session.turn("count to three", settings) if isinstance(e, TurnEvent))
    assert turn.counts.typed_ahead_tokens == 0


def test_rejected_drafts_without_text_are_drawn_by_count():
    from specchat.wording import shown_text

    unseen = TokenEvent(kind=TokenKind.REJECTED, id=-1, text="", position=3, round=1, p=None,
                        q=None, logit_gap=None)
    assert shown_text(unseen) == "✗"
    seen = TokenEvent(kind=TokenKind.REJECTED, id=7, text=" the", position=3, round=1, p=0.1,
                      q=0.5, logit_gap=1.0)
    assert shown_text(seen) == " the"


def test_a_server_url_that_is_not_one_is_refused_in_one_line():
    with pytest.raises(ServerError, match="is not a URL like http://127.0.0.1:8080"):
        ServerClient("ftp://x")


# -- every mode on this target (support.modes) ------------------------------------------------------
SERVER_MODES = modes.modes("llama-server")


@pytest.fixture(scope="module")
def local_target(tiny):
    target = load(tiny.target)
    yield target, calibrated_near_tie(target, floor=1e-3)
    target.close()


@pytest.mark.parametrize("mode", SERVER_MODES, ids=[m.id for m in SERVER_MODES])
def test_mode(mode, spec_server, plain_server, local_target):
    """The server's reply judged whole, token for token with its length and stop reason, by
    the one greedy oracle against target-only here; sampling, its first three tokens against
    the target's own distribution (temperature 1: llama.cpp's sampler order, temperature
    last, gives the same distribution as the engine's)."""
    target, near_tie = local_target
    client = ServerClient((spec_server if mode.drafter == "model" else plain_server).url)
    ids = prompt_ids(target, MODE_PROMPT)
    if mode.decoding == "greedy":
        plain, local = run(SpeculativeEngine(target, NoDrafter(), GREEDY), ids, max_tokens=32)
        # the engine goes on past max_tokens to finish a character; the server stops at
        # n_predict: it is asked for as many tokens as the engine gave
        tokens, stop, drafted = whole_reply(client, ids, GREEDY, local.counts.n_tokens, 0)
        served = dataclasses.replace(plain[-1], token_ids=tokens, stop_reason=stop,
                                     counts=dataclasses.replace(local.counts, n_tokens=len(tokens)))
        parted = assert_same_up_to_a_near_tie(plain, served, near_tie, target=target)
        figure = ("the same reply, 32 tokens" if parted is None else
                  f"parted at token {parted[0]}, a near-tie (gap {parted[1]:.4f})")
    else:
        replies = [whole_reply(client, ids, mode.sampling, 3, seed)
                   for seed in range(modes.SAMPLES)]
        eos = next(t for t in range(target.n_vocab) if target.is_eog(t))
        samples = [tuple(([*t, eos] if stop == "eos" else t)[:3] + [-1] * 3)[:3]
                   for t, stop, _ in replies]
        figure = judge_triples(samples, expected_triples(target, ids, mode.sampling))
        drafted = sum(d for _, _, d in replies)
        figure += f"; {drafted} draft tokens verified by the server"
    if mode.drafter == "model":
        assert drafted > 0, "the server never drafted"
    MODE_FIGURES[mode] = figure
