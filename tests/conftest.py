"""Fixtures: tiny real GGUF models written per test session, and the real default pair when
it is installed (`specchat models fetch default`; .ci/run does it and sets SPECCHAT_REQUIRE_E2E)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tinymodels import TinySpec, write_tiny_gguf, write_tiny_mamba  # noqa: E402

from specchat.backends.llamacpp import LlamaCppBackend  # noqa: E402


@dataclass(frozen=True)
class TinyModels:
    target: Path
    draft: Path
    """Same vocabulary as target, weights = target's plus noise."""
    other_vocab: Path
    """Same size, two token texts swapped."""
    wide_vocab: Path
    """200 more tokens than the target."""
    spm_vocab: Path
    """Another vocabulary type (SentencePiece 'llama')."""
    other_eos: Path
    """EOS is <|endoftext|> instead of <|im_end|>."""
    recurrent: Path
    """A Mamba model: its memory cannot drop part of a sequence."""


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    d = tmp_path_factory.mktemp("tiny")
    base = write_tiny_gguf(d / "tiny-target.gguf", TinySpec(seed=0))
    write_tiny_gguf(d / "tiny-draft.gguf", TinySpec(seed=1, base=base, noise=0.08))
    write_tiny_gguf(d / "tiny-other-vocab.gguf", TinySpec(seed=2, swap_tokens=(40, 41)))
    write_tiny_gguf(d / "tiny-wide-vocab.gguf", TinySpec(seed=3, extra_tokens=200))
    write_tiny_gguf(d / "tiny-spm.gguf", TinySpec(seed=4, tokenizer_model="llama"))
    write_tiny_gguf(d / "tiny-other-eos.gguf", TinySpec(seed=5, eos_name="<|endoftext|>"))
    write_tiny_mamba(d / "tiny-mamba.gguf")
    return TinyModels(
        d / "tiny-target.gguf", d / "tiny-draft.gguf", d / "tiny-other-vocab.gguf",
        d / "tiny-wide-vocab.gguf", d / "tiny-spm.gguf", d / "tiny-other-eos.gguf",
        d / "tiny-mamba.gguf",
    )


def load(path: Path, n_ctx: int = 1024) -> LlamaCppBackend:
    return LlamaCppBackend(path, n_ctx=n_ctx, n_threads=1)


class RecordingBackend:
    """A real backend that also records the logits of every evaluated position, so tests can
    check each emitted token against the rows the engine itself received."""

    def __init__(self, inner: LlamaCppBackend) -> None:
        self._inner = inner
        self.rows: dict[int, np.ndarray] = {}
        """Absolute position of the token these logits choose -> the latest such row."""

    def eval(self, tokens: Sequence[int], logits_from: int) -> np.ndarray:
        start = len(self._inner.tokens)
        rows = self._inner.eval(tokens, logits_from)
        for i, row in enumerate(rows):
            self.rows[start + logits_from + i + 1] = row.copy()
        return rows

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


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


def pytest_terminal_summary(terminalreporter) -> None:
    """Print every greedy divergence the end-to-end tests saw, with its position and gap."""
    try:
        from test_e2e import DIVERGENCES
    except ImportError:
        return
    if DIVERGENCES:
        terminalreporter.section("greedy divergences from target-only (default pair)")
        for line in DIVERGENCES:
            terminalreporter.write_line(line)
