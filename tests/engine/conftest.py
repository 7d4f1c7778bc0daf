"""The tiny pair loaded once per module: the target records every logits row it hands the
engine, so each emitted token can be checked against the row it came from."""

from __future__ import annotations

import pytest
from support.models import RecordingBackend, load


@pytest.fixture(scope="module")
def models(tiny):
    target = RecordingBackend(load(tiny.target))
    draft = load(tiny.draft)
    yield target, draft
    target.close()
    draft.close()


@pytest.fixture(scope="module")
def q4_0_draft(tiny, tmp_path_factory):
    """The tiny draft re-laid as Q4_0 by llama.cpp's quantizer (`specchat models optimize`'s
    layout on x86): another rounding of the draft, the same rule."""
    from specchat.backends.quantize import quantize
    from specchat.catalog.layout import Q4_0

    path = tmp_path_factory.mktemp("q4_0") / "tiny-draft.cpu-q4_0.gguf"
    quantize(tiny.draft, path, Q4_0)
    draft = load(path)
    yield draft
    draft.close()
