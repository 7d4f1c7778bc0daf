"""The transformers backend on tiny checkpoints the suite builds: the tiny GGUFs converted
through transformers' GGUF loader into safetensors folders (the same weights and tokenizer the
llama.cpp tests use, so the two backends can be compared logit for logit)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from support.checks import require_module

require_module("torch")
require_module("transformers")

from support import modes  # noqa: E402
from support.checks import (  # noqa: E402
    GREEDY_CASES,
    MODE_FIGURES,
    SAMPLING,
    calibrated_near_tie,
    check_a_mode,
    check_greedy_rule,
    check_long_conversation,
    check_reply_makes_room,
    check_sampling_rule,
    make_drafter,
)
from support.models import GREEDY, RecordingBackend, load, run  # noqa: E402
from support.processes import specchat  # noqa: E402

from specchat.backends.hf import TransformersBackend, converted_dir  # noqa: E402
from specchat.catalog import compat  # noqa: E402
from specchat.engine.drafters import NoDrafter  # noqa: E402
from specchat.engine.events import RoundEvent  # noqa: E402
from specchat.engine.loop import DraftSettings, SpeculativeEngine  # noqa: E402
from specchat.engine.model_drafter import ModelDrafter  # noqa: E402
from specchat.engine.policy import TreeSettings  # noqa: E402

ON = {"device": os.environ.get("SPECCHAT_TEST_DEVICE") or None, "dtype": "float32"}
"""Where these tests run (benchmarks/gpu/check.sh sets cuda); float32 there too, since they compare
logits with llama.cpp's."""


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("hf-models")


@pytest.fixture(scope="module")
def hf_models(tiny, hf_dir):
    target = RecordingBackend(TransformersBackend(tiny.target, hf_dir, n_ctx=1024, n_threads=1, **ON))
    draft = TransformersBackend(tiny.draft, hf_dir, n_ctx=1024, n_threads=1, **ON)
    yield target, draft
    target.close()
    draft.close()


@pytest.fixture(scope="module")
def hf_small(tiny, hf_dir, hf_models):
    """The tiny pair on transformers with a 256-token context (converted by hf_models)."""
    target = TransformersBackend(tiny.target, hf_dir, n_ctx=256, n_threads=1, **ON)
    draft = TransformersBackend(tiny.draft, hf_dir, n_ctx=256, n_threads=1, **ON)
    yield target, draft
    target.close()
    draft.close()


@pytest.mark.parametrize("policy", ["rolling", "truncate-middle"])
def test_a_conversation_three_contexts_long_keeps_answering(hf_small, hf_near_tie, policy):
    assert check_long_conversation(*hf_small, policy, hf_near_tie)


def test_a_reply_that_reaches_the_end_of_the_context_makes_room_and_goes_on(hf_small,
                                                                           hf_near_tie):
    check_reply_makes_room(*hf_small, hf_near_tie)


def ids_for(backend, text: str) -> list[int]:
    return backend.tokenize(text, special=False)


def test_a_gguf_is_converted_once_into_a_checkpoint_folder(tiny, hf_models, hf_dir):
    folder = converted_dir(tiny.target, hf_dir)
    assert (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()
    again = TransformersBackend(folder, hf_dir, n_ctx=256, n_threads=1, **ON)  # the folder itself
    assert again.n_vocab == hf_models[0].n_vocab and again.can_truncate
    again.close()


def test_same_weights_give_the_same_logits_on_both_backends(tiny, hf_models):
    target, _ = hf_models
    llama = load(tiny.target)
    text = target.render_chat([("user", "hello there")])
    ids = target.tokenize(text)
    assert ids == llama.tokenize(text)
    target.truncate(0)
    ours, theirs = target.eval(ids, 0), llama.eval(ids, 0)
    assert np.abs(ours - theirs).max() < 0.05  # float32 torch against llama.cpp's own kernels
    assert all(target.token_bytes(i) == llama.token_bytes(i) for i in range(target.n_vocab))
    assert {i for i in range(target.n_vocab) if target.is_eog(i)} == \
        {i for i in range(llama.n_vocab) if llama.is_eog(i)}
    target.truncate(0)
    llama.close()


@pytest.fixture(scope="module")
def hf_near_tie(hf_models) -> float:
    return calibrated_near_tie(hf_models[0], floor=1e-4)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**GREEDY_CASES)
def test_greedy_matches_target_only_up_to_a_near_tie(hf_models, hf_near_tie, text, k, drafter,
                                                     policy):
    target, draft = hf_models
    check_greedy_rule(target, make_drafter(drafter, draft), ids_for(target, text), k, policy,
                      hf_near_tie)


TREES = TreeSettings(nodes=6, p_max=1.01, width=3)
"""Branch beside every draft token while 6 alternatives last."""


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=GREEDY_CASES["text"], k=GREEDY_CASES["k"])
def test_greedy_trees_reply_as_the_target_alone(hf_models, hf_near_tie, text, k):
    """A draft tree verified through a 4D attention mask: the target's own reply, and the
    cache holds the committed tokens in their order after every turn."""
    target, draft = hf_models
    events = check_greedy_rule(target, make_drafter("model", draft), ids_for(target, text), k,
                               False, hf_near_tie, tree=TREES)
    assert sum(e.branch_nodes for e in events if isinstance(e, RoundEvent)) > 0
    assert target._cache.get_seq_length() == len(target.tokens)


def test_a_branch_row_is_the_row_of_its_path_evaluated_alone(hf_models):
    """Each node attends to its ancestors only: the row after a branch equals the row after
    the same tokens as a chain, and after `keep_path` the cache is that chain's."""
    target, _ = hf_models
    ids = ids_for(target, "the cat sat on")
    target.truncate(0)
    target.eval(ids[:-1], len(ids))
    rows = target.eval_tree(ids[-1:], [5, 9, 20, 21], [-1, 0, -1, 2])
    target.keep_path([2, 3])
    after = target.eval([33], 0)[0]
    target.truncate(0)
    chain = target.eval(ids + [20, 21, 33], len(ids) - 1)
    assert np.abs(rows[3] - chain[1]).max() < 1e-4 and np.abs(rows[4] - chain[2]).max() < 1e-4
    assert np.abs(after - chain[3]).max() < 1e-4
    target.truncate(0)


@pytest.mark.parametrize("shape", ["chains", "trees"])
def test_speculative_sampling_follows_the_target_distribution(hf_models, shape):
    target, draft = hf_models
    ids = ids_for(target, "sampling")
    rng = np.random.default_rng(7)
    settings = DraftSettings(k=2) if shape == "chains" else DraftSettings(k=1, tree=TREES)
    engine = SpeculativeEngine(target, ModelDrafter(draft, SAMPLING, rng), SAMPLING, settings, rng)
    check_sampling_rule(engine, target, ids)


def test_the_cache_is_kept_across_turns_and_cropped_to_the_committed_tokens(hf_models):
    target, draft = hf_models
    engine = SpeculativeEngine(target, ModelDrafter(draft, GREEDY, np.random.default_rng(0)),
                               GREEDY, DraftSettings(k=4))
    ids = ids_for(target, "first turn")
    _, first = run(engine, ids, max_tokens=12)
    history = ids + first.token_ids
    assert target.tokens == history[: len(target.tokens)] and len(target.tokens) >= len(history) - 1
    assert target._cache.get_seq_length() == len(target.tokens)
    evaluated: list[int] = []
    inner = target._inner.eval
    target._inner.eval = lambda tokens, logits_from: (evaluated.extend(tokens),
                                                      inner(tokens, logits_from))[1]
    try:  # a second turn, target-only on the same backend: only the new tokens are evaluated
        new = ids_for(target, " next")
        _, second = run(SpeculativeEngine(target, NoDrafter(), GREEDY), history + new,
                        max_tokens=5)
    finally:
        del target._inner.eval
    assert len(evaluated) - (second.counts.n_tokens - 1) <= len(new) + 1


def test_incompatible_checkpoints_are_refused_with_the_token_that_differs(tiny, hf_dir, hf_models):
    other = TransformersBackend(tiny.other_vocab, hf_dir, n_ctx=256, n_threads=1, **ON)
    verdict = compat.check_loaded(hf_models[0], other)
    assert not verdict.ok and "token 40 differs" in verdict.reason
    other.close()


def test_ask_runs_on_the_transformers_backend_and_a_foreign_draft_drafts_as_text(tiny, tmp_path):
    proc = specchat("ask", "hello", "--backend", "transformers", "--target", str(tiny.target),
                    "--draft", str(tiny.draft), "--max-tokens", "12", "--json", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert '"type": "turn"' in proc.stdout.splitlines()[-1]
    folder = converted_dir(tiny.other_vocab, tmp_path / "models")
    specchat("ask", "x", "--backend", "transformers", "--target", str(tiny.other_vocab),
             "--draft", "none", "--max-tokens", "1", tmp_path=tmp_path)
    proc = specchat("ask", "f(x) = (y)", "--backend", "transformers", "--target",
                    str(tiny.target), "--draft", str(folder), "--max-tokens", "8",
                    tmp_path=tmp_path)  # llama.cpp's rule refuses it: token 40 differs
    assert proc.returncode == 0 and "(as text)" in proc.stderr, proc.stderr


def test_the_app_runs_a_turn_on_the_transformers_backend(tiny, tmp_path, monkeypatch):
    import asyncio

    from support.pilot import SIZE, make_app, ready, say

    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "models"))
    app = make_app(tiny, tmp_path, max_tokens=12)
    app.settings.models.backend = "transformers"

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            assert type(app.chat_screen.chat.session.engine.target).__name__ == "TransformersBackend"
            await say(app, pilot, "hello")
            turn = app.chat_screen.transcript.last_turn
            assert turn.counts.n_tokens > 0 and turn.counts.n_drafted > 0
    asyncio.run(scenario())


# -- every mode on this target (support.modes) ------------------------------------------------------
HF_MODES = modes.modes("transformers")


@pytest.fixture(scope="module")
def hf_other_vocab(tiny, hf_dir):
    model = TransformersBackend(tiny.other_vocab_draft, hf_dir, n_ctx=1024, n_threads=1, **ON)
    yield model
    model.close()


@pytest.mark.parametrize("mode", HF_MODES, ids=[m.id for m in HF_MODES])
def test_mode(mode, hf_models, hf_other_vocab, hf_near_tie, monkeypatch):
    target, draft = hf_models
    MODE_FIGURES[mode] = check_a_mode(mode, target, draft, hf_other_vocab, hf_near_tie,
                                      monkeypatch)
