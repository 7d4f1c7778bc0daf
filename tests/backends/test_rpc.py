"""Models whose layers live on a `specchat rpc-server` (a real server on loopback, a
subprocess each test starts and stops): the same logits and greedy output as on this machine,
a clear error for a server that is down or dies mid-reply, and the bind rule."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from support import modes
from support.checks import (
    MODE_FIGURES,
    assert_same_up_to_a_near_tie,
    calibrated_near_tie,
    check_a_mode,
)
from support.models import GREEDY, RecordingBackend, load
from support.pilot import SIZE, make_app, ready, run_async, until
from support.processes import RpcServer, free_port, history_path, replying, specchat, specchat_env
from support.tinymodels import TinySpec, write_tiny_gguf

from specchat.backends.isolated import IsolatedBackend
from specchat.backends.llamacpp import LlamaCppBackend
from specchat.backends.rpc import RemoteError
from specchat.chat.history import HistoryStore
from specchat.chat.session import ChatSession, Conversation
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import Event, TokenEvent, TurnEvent
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.model_drafter import ModelDrafter
from specchat.engine.ngram_drafter import NgramDrafter
from specchat.errors import SpecchatError
from specchat.keeper import ModelKeeper
from specchat.settings import DraftOptions, ModelOptions, Settings
from specchat.ui.widgets.live_reply import LiveReply
from specchat.ui.widgets.prompt_input import PromptInput

PROMPTS = ["hello world", "the cat sat on the mat", "def reverse(s):"]


@pytest.fixture(scope="module")
def remote(tiny, tmp_path_factory):
    """The tiny target on a loopback RPC server, and the same model on this machine."""
    server = RpcServer(tmp_path_factory.mktemp("rpc"))
    there = IsolatedBackend(tiny.target, rpc=server.endpoint, n_ctx=1024, n_threads=1)
    here = load(tiny.target)
    draft = load(tiny.draft)
    yield there, here, draft, server
    for model in (there, here, draft):  # before the server goes: freeing talks to it
        model.close()
    server.stop()


def test_a_model_on_an_rpc_server_gives_the_same_logits(remote):
    there, here, _, _ = remote
    assert there.rpc == [remote[3].endpoint] and here.rpc == []
    for text in PROMPTS:
        ids = there.tokenize(text, special=False)
        there.truncate(0)
        here.truncate(0)
        a, b = there.eval(ids, 0), here.eval(ids, 0)
        assert np.allclose(a, b, atol=1e-3), np.abs(a - b).max()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_output_on_the_server_equals_this_machine_and_speculation(remote, prompt):
    there, here, draft, _ = remote
    near_tie = calibrated_near_tie(here, floor=1e-3)
    ids = there.tokenize(prompt, special=False)
    settings = GenerationSettings(max_tokens=24)
    local = list(SpeculativeEngine(here, NoDrafter(), GREEDY).generate(ids, settings))
    plain = list(SpeculativeEngine(there, NoDrafter(), GREEDY).generate(ids, settings))
    spec = SpeculativeEngine(there, ModelDrafter(draft, GREEDY, np.random.default_rng(0)),
                             GREEDY, DraftSettings(k=3))
    turn = list(spec.generate(ids, settings))[-1]
    assert isinstance(turn, TurnEvent) and turn.counts.n_drafted > 0
    assert_same_up_to_a_near_tie(local, plain[-1], near_tie)
    assert_same_up_to_a_near_tie(plain, turn, near_tie)


def test_a_server_that_is_down_is_named(tiny, tmp_path):
    proc = specchat("ask", "hi", "--target", str(tiny.target), "--draft", "none", "--rpc",
                    "127.0.0.1:9", tmp_path=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "specchat: error: RPC server 127.0.0.1:9 is not answering (Connection refused): start "
        "it there with `specchat rpc-server`"]


def test_a_draft_on_the_targets_own_server_is_refused_and_on_a_second_one_speculates(
        tiny, tmp_path):
    """A ggml RPC server serves one client at a time and each model on servers has its own:
    the same server for both is refused before anything loads (it would wait for the target
    to let go); a second server serves the draft."""
    servers = [RpcServer(tmp_path), RpcServer(tmp_path)]
    try:
        same = specchat("ask", "hello", "--target", str(tiny.target), "--draft", str(tiny.draft),
                        "--rpc", servers[0].endpoint, "--draft-rpc", servers[0].endpoint,
                        tmp_path=tmp_path)
        both = specchat("ask", "hello", "--target", str(tiny.target), "--draft", str(tiny.draft),
                        "--rpc", servers[0].endpoint, "--draft-rpc", servers[1].endpoint,
                        "--max-tokens", "12", "--json", "--policy", "fixed", tmp_path=tmp_path)
    finally:
        for server in servers:
            server.stop()
    assert same.returncode == 2 and same.stderr.strip().splitlines()[-1].startswith(
        f"specchat: error: --draft-rpc {servers[0].endpoint} is also the target's server")
    assert both.returncode == 0, both.stderr
    assert (f"target tiny-target (RPC {servers[0].endpoint}) · draft tiny-draft "
            f"(RPC {servers[1].endpoint})") in both.stderr
    turn = json.loads(both.stdout.strip().splitlines()[-1])
    assert turn["type"] == "turn" and turn["n_drafted"] > 0


def test_the_target_swapped_on_its_server_loads_and_a_failed_swap_keeps_the_old_one(
        tiny, tmp_path, long_model):
    """Ctrl+T with the target on a server: the old target lets the server go, so the new one
    can load there at once (a server serves one client at a time); a swap that fails to load
    leaves the old target, which loads there again and answers as before."""
    server = RpcServer(tmp_path)
    settings = Settings(ModelOptions(target=str(tiny.target), draft="ngram", n_ctx=1024,
                                     threads=1, rpc=server.endpoint, rpc_timeout=10))
    host = ModelKeeper(settings)
    engine = host.load()
    try:
        before = list(ChatSession(engine).turn("hello", GenerationSettings(max_tokens=12)))[-1]
        with pytest.raises(SpecchatError):
            host.load_target(engine, str(tmp_path / "missing.gguf"))
        again = list(ChatSession(engine).turn("hello", GenerationSettings(max_tokens=12)))[-1]
        assert again.token_ids == before.token_ids
        t0 = time.monotonic()
        engine, _ = host.load_target(engine, str(long_model))
        # it loaded at once, not after waiting out the server's timeout (what a load on a server
        # the old target still held did)
        assert time.monotonic() - t0 < settings.models.rpc_timeout
        assert engine.target.where == f"RPC {server.endpoint}"
        turn = list(ChatSession(engine).turn("hello", GenerationSettings(max_tokens=12)))[-1]
        assert isinstance(turn, TurnEvent) and turn.counts.n_tokens > 0
    finally:
        engine.close()
        server.stop()


def test_the_draft_swapped_on_its_server_loads_and_bench_takes_one_draft_model_there(
        tiny, tmp_path):
    """Ctrl+D with the draft on its own server: the old draft model lets the server go, so the
    new one loads there at once and drafts; `bench`, which holds its drafters together, takes
    one draft model on --draft-rpc and says why not two, and so does `tune`."""
    servers = [RpcServer(tmp_path), RpcServer(tmp_path)]
    settings = Settings(ModelOptions(target=str(tiny.target), draft=str(tiny.draft), n_ctx=1024,
                                     threads=1, rpc=servers[0].endpoint,
                                     draft_rpc=servers[1].endpoint, rpc_timeout=10),
                        DraftOptions(policy="fixed"))
    host = ModelKeeper(settings)
    engine = host.load()
    try:
        t0 = time.monotonic()
        engine.use_drafter(host.load_drafter(engine, str(tiny.draft)))
        assert time.monotonic() - t0 < settings.models.rpc_timeout  # not a wait for the timeout
        turn = list(ChatSession(engine).turn("hello", GenerationSettings(max_tokens=12)))[-1]
        assert isinstance(turn, TurnEvent) and turn.counts.n_drafted > 0
        servers_flags = ("--rpc", servers[0].endpoint, "--draft-rpc", servers[1].endpoint)
        bench = specchat("bench", "--target", str(tiny.target), "--drafters",
                         f"{tiny.draft},ngram+{tiny.draft}", *servers_flags, tmp_path=tmp_path)
        tune = specchat("tune", "--target", str(tiny.target), "--draft", str(tiny.draft),
                        "--draft", f"ngram+{tiny.draft}", *servers_flags, tmp_path=tmp_path)
    finally:
        engine.close()
        for server in servers:
            server.stop()
    for proc in (bench, tune):
        assert proc.returncode == 2 and "--draft-rpc holds one draft model at a time" in \
            proc.stderr, proc.stderr


def test_the_server_binds_loopback_unless_told_and_then_warns(tmp_path):
    port = str(free_port())
    proc = specchat("rpc-server", "--host", "0.0.0.0", "--port", port, tmp_path=tmp_path)
    assert proc.returncode == 2 and "refusing to serve on 0.0.0.0" in proc.stderr
    assert "SSH tunnel" in proc.stderr and "--expose" in proc.stderr
    exposed = subprocess.Popen(
        [sys.executable, "-m", "specchat", "rpc-server", "--host", "0.0.0.0", "--port", port,
         "--expose"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=specchat_env(tmp_path))
    try:
        assert exposed.stderr is not None
        warning = exposed.stderr.readline()
        assert "no authentication" in warning and f"ssh -N -L {port}:127.0.0.1:{port}" in warning
    finally:
        exposed.kill()
        exposed.wait()


@pytest.fixture
def long_model(tmp_path):
    """A tiny model with a long context, so a reply goes on until the test stops it."""
    path = tmp_path / "tiny-long.gguf"
    write_tiny_gguf(path, TinySpec(seed=0, n_ctx=65536))
    return path


def reply_until(session: ChatSession, text: str, tokens: int) -> Iterator[Event]:
    """A long greedy reply of `session` to `text`, yielded once `tokens` have been shown."""
    events = session.turn(text, GenerationSettings(max_tokens=60000))
    shown = 0
    for event in events:
        shown += isinstance(event, TokenEvent)
        if shown >= tokens:
            return events
    raise AssertionError("the reply ended early")


def same_as_here(session: ChatSession, model: Path, text: str) -> TurnEvent:
    """The next turn of `session` (its target on a server), checked equal to the same
    conversation's turn target-only on this machine up to a near-tie (the server verifies in
    batches of other sizes, whose rounding is the CPU's)."""
    here = LlamaCppBackend(model, n_ctx=4096, n_threads=1)
    try:
        local = ChatSession(SpeculativeEngine(here, NoDrafter(), GREEDY),
                            Conversation(messages=list(session.conversation.messages)))
        settings = GenerationSettings(max_tokens=24)
        ours = list(session.turn(text, settings))[-1]
        theirs = list(local.turn(text, settings))
        assert isinstance(ours, TurnEvent) and isinstance(theirs[-1], TurnEvent)
        assert_same_up_to_a_near_tie(theirs, ours, calibrated_near_tie(here, floor=1e-3))
        return ours
    finally:
        here.close()


def test_a_server_killed_mid_reply_costs_the_turn_and_the_next_turn_goes_on(tmp_path, long_model):
    """The server dies while a reply streams: RemoteError naming it, the target's mirrored
    cache empty and the draft's a prefix of the conversation; with the server still down the
    next turn is refused naming it; once it runs again, the next turn on the same target object
    equals the same conversation target-only here."""
    server = RpcServer(tmp_path)
    target = IsolatedBackend(long_model, rpc=server.endpoint, n_ctx=4096, n_threads=1)
    draft = LlamaCppBackend(long_model, n_ctx=4096, n_threads=1)
    engine = SpeculativeEngine(target, ModelDrafter(draft, GREEDY, np.random.default_rng(0)),
                               GREEDY, DraftSettings(k=3))
    session = ChatSession(engine)
    try:
        session.conversation.messages += [("user", "hello"), ("assistant", "hi there")]
        rest = reply_until(session, "tell me everything", 40)
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(10)
        with pytest.raises(RemoteError) as lost:
            list(rest)
        assert str(lost.value).startswith(
            f"the RPC server ({server.endpoint}) stopped answering: Remote RPC server crashed")
        assert target.tokens == []
        assert session.conversation.messages == [("user", "hello"), ("assistant", "hi there")]
        with pytest.raises(RemoteError, match=f"RPC server {server.endpoint} is not answering"):
            list(session.turn("go on", GenerationSettings(max_tokens=8)))
        server = RpcServer(tmp_path, port=server.port)
        assert same_as_here(session, long_model, "go on").counts.n_drafted > 0
    finally:
        engine.close()
        server.stop()


def test_a_server_that_stops_answering_is_given_up_after_the_timeout(tmp_path, long_model):
    """A server that stops without closing the connection (SIGSTOP, a hung machine): after
    the timeout the turn ends with RemoteError saying so; once it answers again, so does the
    same target."""
    server = RpcServer(tmp_path)
    target = IsolatedBackend(long_model, rpc=server.endpoint, timeout_s=2, n_ctx=4096,
                             n_threads=1)
    session = ChatSession(SpeculativeEngine(target, NgramDrafter(), GREEDY))
    try:
        rest = reply_until(session, "tell me everything", 20)
        server.proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        with pytest.raises(RemoteError, match=r"stopped answering: no answer to a pass of "
                                              r"tiny-long in 2 s \(--rpc-timeout\)"):
            list(rest)
        assert time.monotonic() - t0 < 30
        server.proc.send_signal(signal.SIGCONT)
        same_as_here(session, long_model, "go on")
    finally:
        server.proc.send_signal(signal.SIGCONT)
        target.close()
        server.stop()


def test_a_server_that_hangs_while_the_model_loads_is_given_up_after_the_timeout(tiny, tmp_path):
    """A stopped server still accepts connections (the kernel does), so the probe passes and
    ggml waits on it: the load is given up after the timeout with no progress, naming it."""
    server = RpcServer(tmp_path)
    server.proc.send_signal(signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        with pytest.raises(RemoteError, match=rf"RPC server \({server.endpoint}\) stopped "
                                              r"answering: no progress loading tiny-target \(is it serving "
                                              r"another client\? a server serves one at a "
                                              r"time\) in 2 s"):
            IsolatedBackend(tiny.target, rpc=server.endpoint, timeout_s=2, n_threads=1)
        assert time.monotonic() - t0 < 30
    finally:
        server.proc.send_signal(signal.SIGCONT)
        server.stop()


def test_a_second_client_of_a_busy_server_is_told_why_it_waits(tiny, tmp_path):
    """A ggml RPC server serves one client at a time: a second specchat (another laptop in a
    workshop) waits for the first, and is told after the timeout, with the likely reason."""
    server = RpcServer(tmp_path)
    first = IsolatedBackend(tiny.target, rpc=server.endpoint, n_threads=1)
    try:
        with pytest.raises(RemoteError, match=r"is it serving another client\?"):
            IsolatedBackend(tiny.target, rpc=server.endpoint, timeout_s=2, n_threads=1)
        assert first.eval(first.tokenize("hello", special=False), 0).shape[0] > 0
    finally:
        first.close()
        server.stop()


def test_chat_says_so_and_goes_on_when_the_server_comes_back(tmp_path, long_model):
    """`specchat chat` as a user runs it: the server is killed while a reply streams; one error
    line names it, the reply so far is in the history marked interrupted, and the chat goes
    on: the next message, sent once the server is back, is answered (Ctrl-C stops it)."""
    server = RpcServer(tmp_path)
    chat = subprocess.Popen(
        [sys.executable, "-m", "specchat", "chat", "--target", str(long_model), "--draft",
         "ngram", "--ctx", "65536", "--max-tokens", "60000", "--threads", "1", "--rpc",
         server.endpoint], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=specchat_env(tmp_path))
    assert chat.stdin is not None
    history = history_path(tmp_path)
    try:
        chat.stdin.write("tell me everything\n")
        chat.stdin.flush()
        replying(history, 1)
        server.stop()
        server = RpcServer(tmp_path, port=server.port)
        chat.stdin.write("go on\n")
        chat.stdin.flush()
        replying(history, 2)
        chat.send_signal(signal.SIGINT)  # Ctrl-C: stop this reply
        out, err = chat.communicate(timeout=60)
    finally:
        chat.kill()
        server.stop()
    assert chat.returncode == 0, err
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and f"the RPC server ({server.endpoint}) stopped answering" in \
        errors[0], errors
    store = HistoryStore(history_path(tmp_path))
    (conversation,) = store.conversations()
    messages = store.messages(conversation.id)
    assert [(m.role, m.complete) for m in messages] == [
        ("user", True), ("assistant", False), ("user", True), ("assistant", True)]
    assert messages[-1].content and out.count("you>") == 3  # two turns, then the end


def test_ask_says_where_each_model_runs_and_can_split_the_layers(tiny, tmp_path):
    server = RpcServer(tmp_path)
    try:
        proc = specchat("ask", "hello", "--target", str(tiny.target), "--draft", str(tiny.draft),
                        "--rpc", server.endpoint, "--target-gpu-layers", "1", "--max-tokens", "8",
                        "--json", tmp_path=tmp_path)
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr
    assert (f"specchat: target tiny-target (RPC {server.endpoint}, 1 layers) · draft tiny-draft "
            "(here)") in proc.stderr


def test_the_app_keeps_the_chat_when_the_server_dies_and_enter_sends_the_message_again(
        tmp_path, long_model):
    """In the app: the server dies while a reply streams; the reply says it was cut off and
    why, the message is back in the input box, the app stays; with the server back, Enter
    sends the message again and it is answered."""
    server = RpcServer(tmp_path)
    app = make_app(SimpleNamespace(target=long_model, draft="ngram"), tmp_path, max_tokens=60000)
    app.settings.models.rpc = server.endpoint
    app.settings.models.n_ctx = 65536  # the reply must not end before the server does

    def last() -> LiveReply:
        return app.chat_screen.query(LiveReply).last()

    async def scenario() -> None:
        nonlocal server
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            prompt = app.chat_screen.query_one(PromptInput)
            prompt.text = "tell me everything"
            await pilot.press("enter")
            await until(pilot, lambda: len(last().pieces) > 20)
            server.stop()
            await until(pilot, lambda: last().note.startswith("cut off: the RPC server"))
            assert f"({server.endpoint}) stopped answering" in last().note
            assert prompt.text == "tell me everything" and not app.chat_screen.busy
            server = RpcServer(tmp_path, port=server.port)
            prompt.focus()
            await pilot.press("enter")
            await until(pilot, lambda: app.chat_screen.busy and len(last().pieces) > 20)
            await pilot.press("escape")
            await until(pilot, lambda: not app.chat_screen.busy)
            assert [role for role, _ in app.chat_screen.chat.session.conversation.messages] == [
                "user", "assistant"]
        store = HistoryStore(tmp_path / "history.sqlite3")
        (conversation,) = store.conversations()
        assert [(m.role, m.complete) for m in store.messages(conversation.id)] == [
            ("user", True), ("assistant", False), ("user", True), ("assistant", True)]

    try:
        run_async(scenario)
    finally:
        server.stop()


# -- every mode on this target (support.modes) ------------------------------------------------------
RPC_MODES = modes.modes("rpc")


@pytest.fixture(scope="module")
def rpc_models(remote, tiny):
    """The target's layers on the RPC server, recorded; the drafts here; the near-tie rule
    calibrated on the target there."""
    there, _, draft, _ = remote
    other_vocab = load(tiny.other_vocab_draft)
    yield RecordingBackend(there), draft, other_vocab, calibrated_near_tie(there, floor=1e-3)
    other_vocab.close()


@pytest.mark.parametrize("mode", RPC_MODES, ids=[m.id for m in RPC_MODES])
def test_mode(mode, rpc_models, monkeypatch):
    target, draft, other_vocab, near_tie = rpc_models
    MODE_FIGURES[mode] = check_a_mode(mode, target, draft, other_vocab, near_tie, monkeypatch)
