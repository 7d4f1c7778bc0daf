"""The real default pair, when it is installed (`specchat models fetch default`; .ci/run does it
and sets SPECCHAT_REQUIRE_E2E, which makes its absence a failure, not a skip)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def real_pair() -> tuple[Path, Path]:
    from specchat.catalog.catalog import resolve_model
    from specchat.errors import ModelFileError

    try:
        return resolve_model("default", "target"), resolve_model("default", "draft")
    except ModelFileError as exc:
        if os.environ.get("SPECCHAT_REQUIRE_E2E"):
            pytest.fail(f"the default pair is required here: {exc}")
        pytest.skip(f"default pair not installed: {exc}")
