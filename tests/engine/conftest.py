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
