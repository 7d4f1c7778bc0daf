"""The rewrites `models optimize` runs on a model, in order, each a named stage that says
whether it applies and rewrites the file in place: llama.cpp's quantizer lays every matrix out
in the layout, each Q4_0 block's scale is fitted by least squares, a draft scores its most
frequent tokens only, and each layer's Q, K and V are stacked into one matrix."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specchat.catalog.layout import Q4_0, Layout

Progress = Callable[[str, int, int | None], None]
"""Called with what is being done, how far, and of how much (None: not known yet)."""


@dataclass
class Rewrite:
    """What the stages did to one model (its record says so)."""

    source: Path
    layout: Layout
    role: str
    fitted_scales: bool = False
    hot_tokens: int = 0
    fused_qkv: bool = False


@dataclass(frozen=True)
class Stage:
    name: str
    applies: Callable[[Rewrite, Path], bool]
    """Whether the stage rewrites this model, given the file as the stages before left it."""
    run: Callable[[Rewrite, Path, Path, Progress], None]
    """Rewrite the file (first argument) to the second path."""


def _quantize(rewrite: Rewrite, src: Path, out: Path, progress: Progress) -> None:
    from specchat.optimize.quantize import quantize

    quantize(rewrite.source, out, rewrite.layout,
             lambda done, total: progress(rewrite.layout.name, done, total))


def _fit_scales(rewrite: Rewrite, src: Path, out: Path, progress: Progress) -> None:
    from specchat.optimize.block_scales import rescale

    rescale(rewrite.source, src, out,
            lambda done, total: progress("block scales by least squares", done, total))
    rewrite.fitted_scales = True


def _hot_applies(rewrite: Rewrite, path: Path) -> bool:
    from specchat.optimize.hot_vocab import can_score_hot

    return rewrite.role == "draft" and can_score_hot(path)


def _hot(rewrite: Rewrite, src: Path, out: Path, progress: Progress) -> None:
    from specchat.optimize.hot_vocab import HOT_TOKENS, write_hot_draft

    progress(f"scoring the {HOT_TOKENS} most frequent tokens", 0, None)
    write_hot_draft(src, out, HOT_TOKENS)
    rewrite.hot_tokens = HOT_TOKENS


def _fuse_applies(rewrite: Rewrite, path: Path) -> bool:
    from specchat.optimize.fused_qkv import can_fuse_qkv

    return can_fuse_qkv(path)


def _fuse(rewrite: Rewrite, src: Path, out: Path, progress: Progress) -> None:
    from specchat.optimize.fused_qkv import write_fused_qkv

    progress("one attention input matrix a layer", 0, None)
    write_fused_qkv(src, out)
    rewrite.fused_qkv = True


STAGES = (
    Stage("quantize", lambda rewrite, path: True, _quantize),
    # the same bytes, closer to the source at the same speed
    Stage("block scales", lambda rewrite, path: rewrite.layout == Q4_0, _fit_scales),
    # a draft's proposals are verified over the whole vocabulary: lossless
    Stage("hot vocabulary", _hot_applies, _hot),
    # one product a layer where there were three, on the same rows: the same bits
    Stage("fused QKV", _fuse_applies, _fuse),
)


def rewrite(source: Path, layout: Layout, role: str, out: Path, progress: Progress) -> Rewrite:
    """Run every stage that applies, in order, each from the file the one before wrote; the
    result at `out` (written beside it first, `out` only once every stage is done)."""
    done = Rewrite(source, layout, role)
    current = out.with_suffix(".gguf.partial")
    for stage in STAGES:
        if not stage.applies(done, current):
            continue
        step = current.with_suffix(f".{stage.name.replace(' ', '-')}")
        stage.run(done, current, step, progress)
        step.replace(current)
    current.replace(out)
    return done
