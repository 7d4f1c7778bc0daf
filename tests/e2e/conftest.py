"""The real default pair, when it is installed (`specchat models fetch default`; .ci/run does it
and sets SPECCHAT_REQUIRE_E2E, which makes its absence a failure, not a skip)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.checks import missing


@pytest.fixture(scope="session")
def real_pair() -> tuple[Path, Path]:
    from specchat.catalog.catalog import resolve_model
    from specchat.errors import ModelFileError

    try:
        return resolve_model("default", "target"), resolve_model("default", "draft")
    except ModelFileError as exc:
        missing("the default pair", f"specchat models fetch default ({exc})")
