"""Tiny real models and the real default pair, and the few ways the tests run them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specchat.engine.backend import Backend
from specchat.engine.events import TurnEvent
from specchat.engine.loop import GenerationSettings, SpeculativeEngine
from specchat.engine.sampling import SamplingParams
from support.tinymodels import TinySpec, write_tiny_gguf, write_tiny_mamba


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
    other_vocab_draft: Path
    """The draft's weights with two token texts swapped: another vocabulary that drafts well
    as text (the modes' as-text drafter)."""


def write_tiny_models(d: Path) -> TinyModels:
    """Every tiny model the tests use, written into `d` (a few MB, well under a second)."""
    base = write_tiny_gguf(d / "tiny-target.gguf", TinySpec(seed=0))
    write_tiny_gguf(d / "tiny-draft.gguf", TinySpec(seed=1, base=base, noise=0.08))
    write_tiny_gguf(d / "tiny-other-vocab.gguf", TinySpec(seed=2, swap_tokens=(40, 41)))
    write_tiny_gguf(d / "tiny-wide-vocab.gguf", TinySpec(seed=3, extra_tokens=200))
    write_tiny_gguf(d / "tiny-spm.gguf", TinySpec(seed=4, tokenizer_model="llama"))
    write_tiny_gguf(d / "tiny-other-eos.gguf", TinySpec(seed=5, eos_name="<|endoftext|>"))
    write_tiny_mamba(d / "tiny-mamba.gguf")
    write_tiny_gguf(d / "tiny-other-vocab-draft.gguf",
                    TinySpec(seed=1, base=base, noise=0.08, swap_tokens=(40, 41)))
    return TinyModels(
        d / "tiny-target.gguf", d / "tiny-draft.gguf", d / "tiny-other-vocab.gguf",
        d / "tiny-wide-vocab.gguf", d / "tiny-spm.gguf", d / "tiny-other-eos.gguf",
        d / "tiny-mamba.gguf", d / "tiny-other-vocab-draft.gguf",
    )


def load(path: Path, n_ctx: int = 1024) -> Backend:
    """A tiny model on llama.cpp (imported here, so the transformers tests need no llama.cpp
    build: a GPU check runs them before or without one)."""
    from specchat.backends.llamacpp import LlamaCppBackend

    return LlamaCppBackend(path, n_ctx=n_ctx, n_threads=1)


class RecordingBackend:
    """A real backend that also records the logits of every evaluated position, so tests can
    check each emitted token against the rows the engine itself received in that run."""

    def __init__(self, inner: Backend) -> None:
        self._inner = inner
        self.rows: dict[int, np.ndarray] = {}
        """Absolute position of the token these logits choose -> the latest such row, since
        the last `record()`."""

    def record(self) -> dict[int, np.ndarray]:
        """Start a new record (the next run's rows only) and return it."""
        self.rows = {}
        return self.rows

    def eval(self, tokens: Sequence[int], logits_from: int) -> np.ndarray:
        start = len(self._inner.tokens)
        rows = self._inner.eval(tokens, logits_from)
        for i, row in enumerate(rows):
            self.rows[start + logits_from + i + 1] = row.copy()
        return rows

    def eval_tree(self, tokens: Sequence[int], nodes: Sequence[int],
                  parents: Sequence[int]) -> np.ndarray:
        """A tree's rows are recorded when `keep_path` says which stood (siblings share a
        position)."""
        base = len(self._inner.tokens) + len(tokens)
        rows = self._inner.eval_tree(tokens, nodes, parents)
        self._tree = (base, list(parents), rows)
        return rows

    def keep_path(self, path: Sequence[int]) -> None:
        base, parents, rows = self._tree
        self._inner.keep_path(path)
        self.rows[base] = rows[0].copy()
        for depth, node in enumerate(path):
            self.rows[base + depth + 1] = rows[node + 1].copy()

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


GREEDY = SamplingParams()


def run(engine: SpeculativeEngine, prompt: list[int], **kw) -> tuple[list, TurnEvent]:
    events = list(engine.generate(prompt, GenerationSettings(**kw)))
    assert isinstance(events[-1], TurnEvent)
    return events, events[-1]


def prompt_ids(backend, text: str) -> list[int]:
    return backend.tokenize(text, special=False)


def lay_default_pair(models: Path, target: Path, draft: Path) -> Path:
    """A models folder holding `target` and `draft` under the default pair's file names (the
    catalog resolves `default` to them): hard links, or links where the files live on another
    file system (the real pair)."""
    from specchat.catalog.catalog import Catalog

    catalog = Catalog.load()
    models.mkdir()
    for role, path in (("target", target), ("draft", draft)):
        link = models / catalog.models[catalog.pairs["default"][role]].file
        try:
            os.link(path, link)  # what `models path` prints is the folder's file
        except OSError:
            link.symlink_to(path)
    return models
