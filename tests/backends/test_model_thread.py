"""Every llama.cpp pass of the process on one thread, whoever asks (specchat/native/model_thread.py):
libgomp slows a model evaluated from a second thread by a third."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import llama_cpp
import numpy as np
import pytest
from support.models import load, prompt_ids

from specchat.chat.worker import in_worker
from specchat.errors import ContextOverflowError
from specchat.native import model_thread


@pytest.fixture
def decoded_on(monkeypatch) -> list[threading.Thread]:
    """The thread of each llama_decode from here on (the real one runs)."""
    seen: list[threading.Thread] = []
    real = llama_cpp.llama_decode

    def recorded(ctx, batch):
        seen.append(threading.current_thread())
        return real(ctx, batch)

    monkeypatch.setattr(llama_cpp, "llama_decode", recorded)
    return seen


def on_new_thread(fn):
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the call never came back"
    return out[0]


def test_passes_asked_for_from_any_thread_run_on_the_model_thread(tiny, decoded_on):
    model = load(tiny.target)
    ids = prompt_ids(model, "one thread")
    rows = []
    for ask in (lambda f: f(), on_new_thread, on_new_thread):
        model.truncate(0)
        rows.append(ask(lambda: model.eval(ids, len(ids) - 1)))
    model.close()
    assert len(decoded_on) == 3 and {t.name for t in decoded_on} == {"specchat-llama"}
    assert all(np.array_equal(rows[0], r) for r in rows[1:])  # each caller got its own rows


def test_a_job_on_the_model_thread_evaluates_at_once_and_errors_reach_the_caller(tiny, decoded_on):
    model = load(tiny.target)
    ids = prompt_ids(model, "nested")
    # a pass asked for on the model thread itself runs there, not queued behind its own job
    rows = on_new_thread(lambda: model_thread.call(lambda: model.eval(ids, len(ids) - 1)))
    assert rows.shape == (1, model.n_vocab) and model_thread.here() is False
    with pytest.raises(ContextOverflowError):
        model.eval([ids[0]] * (model.n_ctx + 1), model.n_ctx)
    model.close()


def test_a_line_chat_turn_runs_on_the_model_thread():
    def turn(cancel):
        yield threading.current_thread().name

    assert list(in_worker(turn)) == ["specchat-llama"]


def test_a_line_chat_turn_left_unread_is_stopped_so_the_model_thread_is_free_again():
    def turn(cancel):
        while not cancel.wait(0.01):  # a turn runs until it is cancelled
            yield "a round"

    events = in_worker(turn)
    next(events)
    events.close()
    assert model_thread.submit(lambda: "free").result(timeout=30) == "free"


ADOPTING = """
import json, sys, threading
import llama_cpp
from specchat.native import model_thread
from specchat.backends.llamacpp import LlamaCppBackend

model_thread.adopt()
seen = []
real = llama_cpp.llama_decode
llama_cpp.llama_decode = lambda ctx, batch: seen.append(threading.current_thread().name) or real(ctx, batch)
model = LlamaCppBackend(sys.argv[1], n_ctx=256, n_threads=1)
model.eval(model.tokenize("adopted"), 0)
refused = []
def elsewhere():
    try:
        model.eval(model.tokenize(" again"), 0)
    except RuntimeError as exc:
        refused.append(str(exc))
thread = threading.Thread(target=elsewhere)
thread.start()
thread.join()
print(json.dumps({"seen": seen, "refused": refused}))
"""


def test_a_program_that_adopts_its_main_thread_runs_every_pass_there_and_refuses_others(tiny):
    """`ask`, `bench` and `tune` make their main thread the model thread: no pass is handed
    over, and a pass asked for from another thread is an error, not a slow pass."""
    out = subprocess.run([sys.executable, "-c", ADOPTING, str(tiny.target)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["seen"] == ["MainThread"]
    assert len(got["refused"]) == 1 and "takes no work from other threads" in got["refused"][0]
