"""Opening a session: what loading made is left out of Python's full collections."""

from __future__ import annotations

import gc

from specchat.loading import open_session
from specchat.settings import ModelOptions, Settings


def test_what_loading_made_is_left_out_of_full_collections(tiny):
    """A full collection walked every object the imports and the models had made and held the
    GIL for 67-102 ms while the model thread waited for it (docs/lab/2026-12-07-the-app-in-one-
    process-and-a-catch-up-probe.md): `open_session`, which the app, `chat` and `ask` open
    every session with, moves them out of its way."""
    gc.unfreeze()
    try:
        open_session(Settings(ModelOptions(target=str(tiny.target), draft=str(tiny.draft),
                                           n_ctx=256, threads=1)))
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
