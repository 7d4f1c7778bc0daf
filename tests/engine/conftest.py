"""The tiny pair loaded once per module: the target records every logits row it hands the
engine, so each emitted token can be checked against the row it came from."""

from __future__ import annotations

import pytest
from support.checks import calibrated_near_tie
from support.models import RecordingBackend, load


@pytest.fixture(scope="module")
def models(tiny):
    target = RecordingBackend(load(tiny.target))
    draft = load(tiny.draft)
    yield target, draft
    target.close()
    draft.close()


@pytest.fixture(scope="module")
def near_tie(models) -> float:
    """How far batching moves the tiny target's top-2 gap (4x, at least 0.001): the greedy
    oracles' near-tie, never above their ceiling."""
    return calibrated_near_tie(models[0], floor=1e-3)


@pytest.fixture(scope="module")
def q4_0_draft(tiny, tmp_path_factory):
    """The tiny draft re-laid as Q4_0 by llama.cpp's quantizer (`specchat models optimize`'s
    layout on x86): another rounding of the draft, the same rule."""
    from specchat.catalog.layout import Q4_0
    from specchat.optimize.quantize import quantize

    path = tmp_path_factory.mktemp("q4_0") / "tiny-draft.cpu-q4_0.gguf"
    quantize(tiny.draft, path, Q4_0)
    draft = load(path)
    yield draft
    draft.close()


HOT_TINY = 128
"""Token ids the tiny hot-vocabulary draft scores, of its 265."""


@pytest.fixture(scope="module")
def hot_draft(tiny, tmp_path_factory):
    """The tiny draft scoring only its first 128 token ids (`specchat models optimize`'s draft
    on a large vocabulary, optimize/hot_vocab.py): every other logit is -inf, so it cannot
    propose half the tokens the target may pick."""
    from specchat.optimize.hot_vocab import write_hot_draft

    path = tmp_path_factory.mktemp("hot") / "tiny-draft.hot.gguf"
    write_hot_draft(tiny.draft, path, HOT_TINY)
    draft = load(path)
    yield draft
    draft.close()
