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


@pytest.fixture(scope="session")
def optimized_pair(real_pair, tmp_path_factory) -> tuple[Path, Path]:
    """The default pair re-laid as Q4_0 (`specchat models optimize default`'s layout on x86):
    the files that command made where it was run, else made here by the same quantizer."""
    from specchat.catalog.catalog import models_dir
    from specchat.catalog.layout import Q4_0
    from specchat.optimize.quantize import quantize

    made = []
    for path in real_pair:
        if path.stem.endswith(Q4_0.suffix):  # `default` already names the optimized file
            made.append(path)
            continue
        out = models_dir() / f"{path.stem}.{Q4_0.suffix}.gguf"
        if not out.is_file():
            out = tmp_path_factory.mktemp("q4_0") / out.name
            quantize(path, out, Q4_0)
        made.append(out)
    return made[0], made[1]


@pytest.fixture(scope="session")
def shipped_pair(real_pair) -> tuple[Path, Path]:
    """The default pair as the catalog ships it (`default` may name its optimized layout)."""
    from specchat.catalog.catalog import Catalog, resolve_model

    pair = Catalog.load().pairs["default"]
    return resolve_model(pair["target"], "target"), resolve_model(pair["draft"], "draft")
