"""Models whose layers live on a `specchat rpc-server` (a real server on loopback, a
subprocess each test starts and stops): the same logits and greedy output as on this machine,
a clear error for a server that is down or dies mid-reply, and the bind rule."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    GREEDY,
    RpcServer,
    assert_same_up_to_a_near_tie,
    calibrated_near_tie,
    history_path,
    load,
    saved_reply,
    specchat,
    specchat_env,
)
from tinymodels import TinySpec, write_tiny_gguf

from specchat.backends.llamacpp import LlamaCppBackend
from specchat.chat.history import HistoryStore
from specchat.chat.session import ChatSession, Conversation
from specchat.engine.drafters import ModelDrafter, NoDrafter
from specchat.engine.events import TurnEvent
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine

PROMPTS = ["hello world", "the cat sat on the mat", "def reverse(s):"]


@pytest.fixture(scope="module")
def remote(tiny, tmp_path_factory):
    """The tiny target on a loopback RPC server, and the same model on this machine."""
    server = RpcServer(tmp_path_factory.mktemp("rpc"))
    there = LlamaCppBackend(tiny.target, n_ctx=1024, n_threads=1, rpc=server.endpoint)
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
    assert isinstance(turn, TurnEvent) and turn.n_drafted > 0
    assert_same_up_to_a_near_tie(local, plain[-1].token_ids, near_tie)
    assert_same_up_to_a_near_tie(plain, turn.token_ids, near_tie)


def test_a_server_that_is_down_is_named(tiny, tmp_path):
    proc = specchat("ask", "hi", "--target", str(tiny.target), "--draft", "none", "--rpc",
                    "127.0.0.1:9", tmp_path=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "specchat: error: RPC server 127.0.0.1:9 is not answering (Connection refused): start "
        "it there with `specchat rpc-server`"]


def test_the_server_binds_loopback_unless_told_and_then_warns(tmp_path):
    with socket.socket() as s:  # a port free on every address
        s.bind(("0.0.0.0", 0))
        port = str(s.getsockname()[1])
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


def chat_on_a_server_until_it_replies(tmp_path, *flags: str) -> tuple[subprocess.Popen, RpcServer, Path]:
    """`specchat chat` with a long-context tiny target on a fresh server, streaming a long
    reply: returned once the history shows the reply has begun."""
    long = tmp_path / "tiny-long.gguf"
    write_tiny_gguf(long, TinySpec(seed=0, n_ctx=65536))
    server = RpcServer(tmp_path)
    chat = subprocess.Popen(
        [sys.executable, "-m", "specchat", "chat", "--target", str(long), "--draft", "ngram",
         "--ctx", "65536", "--max-tokens", "60000", "--threads", "1", "--rpc", server.endpoint,
         *flags], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, env=specchat_env(tmp_path))
    assert chat.stdin is not None and chat.stderr is not None
    chat.stdin.write("tell me everything\n")
    chat.stdin.flush()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (saved_reply(history_path(tmp_path)) or ("",))[0]:
        time.sleep(0.05)
    return chat, server, long


def error_lines(chat: subprocess.Popen) -> list[str]:
    assert chat.stderr is not None
    return [line for line in chat.stderr.read().splitlines() if "error" in line]


def test_a_server_that_stops_answering_is_given_up_after_the_timeout(tmp_path):
    chat, server, _ = chat_on_a_server_until_it_replies(tmp_path, "--rpc-timeout", "3")
    server.proc.send_signal(signal.SIGSTOP)  # the connection stays open; nothing answers
    try:
        chat.wait(30)
        errors = error_lines(chat)
    finally:
        server.proc.send_signal(signal.SIGCONT)
        server.stop()
    assert chat.returncode == 2 and len(errors) == 1, errors
    assert "stopped answering: no answer to a target pass in 3 s (--rpc-timeout)" in errors[0]


def test_a_server_killed_mid_reply_is_named_and_the_conversation_goes_on(tmp_path):
    """`specchat chat` with its target on a server that is killed while a reply streams: one
    line naming the server, exit 2, the reply so far in the history marked interrupted; the
    conversation then continues on a new server, the same as on this machine."""
    chat, server, long = chat_on_a_server_until_it_replies(tmp_path)
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(10)
    chat.wait(60)
    errors = error_lines(chat)
    assert chat.returncode == 2 and len(errors) == 1, errors
    assert f"the RPC server ({server.endpoint}) stopped answering" in errors[0]
    store = HistoryStore(history_path(tmp_path))
    (conversation,) = store.interrupted()
    messages = store.messages(conversation.id)
    assert [(m.role, m.complete) for m in messages] == [("user", True), ("assistant", False)]

    again = RpcServer(tmp_path)
    there = LlamaCppBackend(long, n_ctx=2048, n_threads=1, rpc=again.endpoint)
    here = LlamaCppBackend(long, n_ctx=2048, n_threads=1)
    try:
        history = [(m.role, m.content[:200]) for m in messages]  # the cut reply, shortened
        turns = [list(ChatSession(SpeculativeEngine(model, NoDrafter(), GREEDY),
                                  Conversation(messages=list(history))).turn(
            "go on", GenerationSettings(max_tokens=24))) for model in (there, here)]
        assert turns[0][-1].token_ids == turns[1][-1].token_ids
    finally:
        there.close()
        here.close()
        again.stop()


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
