"""`specchat ask` as a user runs it: a real process on tiny real models."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from support.models import GREEDY
from support.processes import specchat
from support.tinymodels import TinySpec, write_tiny_gguf

from specchat.backends.llamacpp import LlamaCppBackend
from specchat.chat.session import ChatSession
from specchat.chat.worker import in_worker
from specchat.engine.events import turn_of
from specchat.engine.loop import GenerationSettings, SpeculativeEngine
from specchat.engine.ngram_drafter import NgramDrafter

TOKEN_KEYS = {"type", "kind", "id", "text", "position", "round", "p", "q", "logit_gap"}
TURN_KEYS = {
    "text", "token_ids", "prompt_token_ids", "n_tokens", "n_drafted", "n_accepted",
    "acceptance_rate", "mean_accepted_length", "tokens_per_second", "ttft_s", "wall_s",
    "target_passes", "draft_passes", "draft", "k", "speedup", "baseline_tokens_per_second",
    "baseline_source",
}




def test_json_stream_has_every_event_and_the_turn_last(tiny, tmp_path):
    proc = specchat("ask", "hello", "--target", str(tiny.target), "--draft", str(tiny.draft),
                    "--max-tokens", "20", "--policy", "fixed", "--k", "3", "--json",
                    tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    tokens = [e for e in lines if e["type"] == "token"]
    assert tokens and all(TOKEN_KEYS <= e.keys() for e in tokens)
    assert {e["kind"] for e in tokens} >= {"target", "accepted"}
    assert any(e["type"] == "round" for e in lines)
    turn = lines[-1]
    assert turn["type"] == "turn" and TURN_KEYS <= turn.keys()
    assert turn["token_ids"] == [e["id"] for e in tokens if e["kind"] != "rejected"]
    assert turn["k"] == 3 and turn["draft"] == "tiny-draft"
    depth = len(turn["prompt_token_ids"]) + turn["n_tokens"]
    # steps among the rounds where the reply had six of them, the rest where it ended
    assert re.fullmatch(rf"4 target-only steps at (depth |depths \d+-){depth}", turn["baseline_source"])
    assert turn["speedup"] == pytest.approx(turn["tokens_per_second"]
                                            / turn["baseline_tokens_per_second"])


def test_ask_drafts_trees_and_says_where_it_cannot(tiny, tmp_path):
    """--tree: the rounds' events carry the branches verified; a drafter that drafts chains
    (a draft of another vocabulary, drafting as text) says so once, in the line that says
    where the models run."""
    proc = specchat("ask", "hello", "--target", str(tiny.target), "--draft", str(tiny.draft),
                    "--max-tokens", "20", "--tree", "--tree-p", "1", "--json", "--policy", "fixed",
                    tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert sum(e["branch_nodes"] for e in lines if e["type"] == "round") > 0
    assert all("branch" in e for e in lines if e["type"] == "token")
    trees = specchat("ask", "hello", "--target", str(tiny.target), "--draft", str(tiny.draft),
                     "--max-tokens", "8", "--tree", tmp_path=tmp_path)
    assert trees.returncode == 0, trees.stderr
    assert "guarded k=3 tree" in trees.stderr and "drafts chains" not in trees.stderr
    chains = specchat("ask", "f(x) = (y)", "--target", str(tiny.target), "--draft",
                      str(tiny.other_vocab), "--max-tokens", "8", "--tree", tmp_path=tmp_path)
    assert chains.returncode == 0, chains.stderr
    assert chains.stderr.count("(as text) drafts chains") == 1, chains.stderr


def test_plain_output_streams_the_reply_then_a_stats_line(tiny, tmp_path):
    proc = specchat("ask", "hello", "--target", str(tiny.target), "--draft", "ngram",
                    "--max-tokens", "12", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "12 tokens" in proc.stderr and "tok/s" in proc.stderr and "TTFT" in proc.stderr


def test_a_draft_with_another_vocabulary_drafts_as_text(tiny, tmp_path):
    """llama.cpp's rule refuses it (token 40 differs); specchat drafts with it as text."""
    proc = specchat("ask", "f(x) = (y)", "--target", str(tiny.target), "--draft",
                    str(tiny.other_vocab), "--max-tokens", "12", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "tiny-other-vocab (as text)" in proc.stderr and "12 tokens" in proc.stderr


def truncated_copy(src: Path, dst: Path) -> Path:
    dst.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    return dst


@pytest.mark.parametrize(
    "case, expected",
    [
        ("missing", "model file not found"),
        ("not_gguf", "not a GGUF file"),
        ("truncated", "truncated or corrupt"),
        ("spm", "vocabulary types differ"),
        ("too_long", "the context holds"),
        ("recurrent", "tiny-mamba: this model's memory cannot drop part of a sequence"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(tiny, tmp_path, case, expected):
    target, draft, prompt, extra = str(tiny.target), "none", "hi", []
    if case == "missing":
        target = str(tmp_path / "nope.gguf")
    elif case == "not_gguf":
        (tmp_path / "notes.gguf").write_text("just text")
        target = str(tmp_path / "notes.gguf")
    elif case == "truncated":
        target = str(truncated_copy(tiny.target, tmp_path / "cut.gguf"))
    elif case == "spm":
        draft = str(tiny.spm_vocab)
    elif case == "recurrent":  # n-gram proposals on a repetitive prompt get refused
        target, draft, extra = str(tiny.recurrent), "ngram", ["--ngram-n", "1", "--max-tokens",
                                                               "64"]
        prompt = "ab" * 20
    elif case == "too_long":
        prompt, extra = "word " * 400, ["--ctx", "256"]
    proc = specchat("ask", prompt, "--target", target, "--draft", draft, *extra, tmp_path=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert expected in lines[0]


def test_settings_saved_in_the_config_file_become_the_defaults(tiny, tmp_path):
    (tmp_path / "config.toml").write_text("[engine]\nk = 2\nmax_tokens = 5\n")
    proc = specchat("ask", "hi", "--target", str(tiny.target), "--draft", str(tiny.draft),
                    "--json", tmp_path=tmp_path)
    turn = json.loads(proc.stdout.splitlines()[-1])
    assert turn["k"] == 2 and turn["n_tokens"] <= 5
    override = specchat("ask", "hi", "--target", str(tiny.target), "--draft", str(tiny.draft),
                        "--json", "--policy", "fixed", "--k", "4", tmp_path=tmp_path)
    assert json.loads(override.stdout.splitlines()[-1])["k"] == 4


def test_ctrl_c_while_the_main_thread_prints_stops_the_reply_not_specchat(tmp_path):
    """`chat` runs a turn in a worker (cli.in_worker) while the main thread prints and saves
    what comes: Ctrl-C that lands while the main thread is busy with a token stops the reply
    (the turn ends `cancelled`, its reply kept) instead of ending specchat with
    KeyboardInterrupt. Ctrl-C after the turn is the terminal's again: the handler the turn
    found (Python's own here, whatever earlier tests in this process left) is back."""
    model = tmp_path / "tiny-long.gguf"
    write_tiny_gguf(model, TinySpec(seed=0, n_ctx=65536))
    target = LlamaCppBackend(model, n_ctx=65536, n_threads=1)
    session = ChatSession(SpeculativeEngine(target, NgramDrafter(), GREEDY))
    events = []
    found = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for event in in_worker(lambda cancel: session.turn(
                "tell me everything", GenerationSettings(max_tokens=60000), cancel)):
            if len(events) == 20:  # Ctrl-C while the main thread is busy with this token
                os.kill(os.getpid(), signal.SIGINT)
                sum(range(200_000))  # the handler runs here, in the main thread
            events.append(event)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100):  # the signal may reach another thread first: the main thread's
                time.sleep(0.05)  # handler runs at its next check, within these 5 s on any load
    finally:
        signal.signal(signal.SIGINT, found)
        target.close()
    turn = turn_of(events)
    assert turn.stop_reason == "cancelled" and turn.counts.n_tokens > 0
    assert session.conversation.messages[-1] == ("assistant", turn.text)
