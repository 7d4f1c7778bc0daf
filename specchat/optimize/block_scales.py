"""Q4_0 blocks whose scales are chosen by least squares against the source's own weights.

llama.cpp's Q4_0 quantizer (without an importance matrix, as `models optimize` runs it) gives
each block of 32 weights the scale that puts its largest magnitude exactly on the grid's end,
-8, and rounds the rest to that grid. Re-laying a model that was already quantized (Q4_K,
Q6_K, ...) that way adds a second rounding as large as the first. Trying a few scales around
that one, refitting each to the weights by least squares, and keeping the block's best cuts the
squared error of the re-laid matrices by about a fifth on the default pair, in the same bytes:
the file is still plain Q4_0, read by the same repacked kernels at the same speed
(docs/lab/2026-12-03-q4-0-scales-by-least-squares.md).

The scales llama.cpp's quantizer would choose are among those tried, so no block ends up
further from its source than llama.cpp's rounding leaves it (tests/catalog/test_block_scales.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

BLOCK = 32
"""Weights a Q4_0 block holds, under one float16 scale."""
SCALE_STEPS = np.arange(-10, 11, 2) / 10
"""Grid ends tried besides llama.cpp's -8: -8 - step (-9 to -7). Finer or wider steps measured
no lower error on the default pair's matrices."""
WEIGHTS_A_CHUNK = 1 << 18
"""Weights re-laid at once: each of the chunk's temporaries (1 MB of float32) stays near a
core's cache, which made a matrix about twice as fast as chunks of 25 MB."""

Progress = Callable[[int, int], None]
"""Called with (tensors done, tensors in all)."""


def _refit(x: np.ndarray, q: np.ndarray, xx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The float16 scale that fits the levels `q` to `x` best in each block (the nearest
    float16 to the least-squares scale), and the squared error it leaves."""
    sq = np.einsum("ij,ij->i", q, q, dtype=np.float64)
    sxq = np.einsum("ij,ij->i", x, q, dtype=np.float64)
    d = (sxq / np.where(sq > 0, sq, 1)).astype(np.float16).astype(np.float64)
    return d, xx - 2 * d * sxq + d * d * sq


def peaks(x: np.ndarray) -> np.ndarray:
    """Each block's weight of the largest magnitude, with its sign."""
    return x[np.arange(len(x)), np.argmax(np.abs(x), axis=1)]


def reference_levels(x: np.ndarray, peak: np.ndarray) -> np.ndarray:
    """llama.cpp's Q4_0 levels for blocks `x` whose `peaks` are `peak` (quantize_row_q4_0_ref):
    the peak at -8, the rest rounded half up on that grid, as integers -8..7."""
    d = peak / np.float32(-8)
    with np.errstate(divide="ignore", over="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0))
    scaled = x * inv[:, None]
    tiny = ~np.isfinite(inv)  # a scale below float32's normal range: its inverse overflows
    scaled[tiny] = x[tiny] / d[tiny, None]
    return np.minimum(15, np.trunc(scaled + np.float32(8.5))) - 8


def least_squares_q4_0(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Float16 scales (n,) and levels (n, 32) as int8 in -8..7 for `n` blocks of 32 float32
    weights: of llama.cpp's levels and those of each grid end in SCALE_STEPS, the levels and
    refitted scale that leave the least squared error, block by block."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    xx = np.einsum("ij,ij->i", x, x, dtype=np.float64)
    peak = peaks(x)
    best_q = reference_levels(x, peak)
    best_d, best_err = _refit(x, best_q, xx)
    unit = x / np.where(peak == 0, np.float32(1), peak)[:, None]  # the peak at 1
    for step in SCALE_STEPS:
        q = np.rint(unit * np.float32(-8 - step))
        np.clip(q, -8, 7, out=q)
        d, err = _refit(x, q, xx)
        better = err < best_err
        np.copyto(best_q, q, where=better[:, None])
        np.copyto(best_d, d, where=better)
        np.copyto(best_err, err, where=better)
    return best_d.astype(np.float16), best_q.astype(np.int8)


def pack_q4_0(d: np.ndarray, q: np.ndarray) -> np.ndarray:
    """GGUF's Q4_0 bytes, 18 a block: the float16 scale, then weight j's level + 8 in the low
    nibble of byte j and weight 16 + j's in its high nibble."""
    n = len(d)
    u = (q.astype(np.int16) + 8).astype(np.uint8)
    out = np.empty((n, 2 + BLOCK // 2), np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8).reshape(n, 2)
    out[:, 2:] = u[:, :BLOCK // 2] | (u[:, BLOCK // 2:] << 4)
    return out


def q4_0_rows(weights: np.ndarray, threads: int = 0) -> np.ndarray:
    """A matrix (rows, columns) as Q4_0 rows of bytes, least-squares scales, on `threads`
    threads (0: every core; numpy lets go of the GIL in the arithmetic)."""
    rows, cols = weights.shape
    step = max(1, WEIGHTS_A_CHUNK // cols)

    def chunk(lo: int) -> np.ndarray:
        part = weights[lo:lo + step].astype(np.float32).reshape(-1, BLOCK)
        return pack_q4_0(*least_squares_q4_0(part)).reshape(-1, cols // BLOCK * 18)

    with ThreadPoolExecutor(threads or os.cpu_count() or 1) as pool:
        return np.concatenate(list(pool.map(chunk, range(0, rows, step))))


def rescale(source: Path, laid: Path, out: Path, progress: Progress | None = None) -> int:
    """Write `laid` (llama.cpp's Q4_0 re-laying of `source`) to `out` with every Q4_0 matrix
    rounded again from `source`'s own weights by least squares; the metadata and every other
    tensor as `laid` has them. Returns how many matrices were rounded again (a source tensor in
    a type gguf-py cannot read keeps llama.cpp's rounding)."""
    import gguf
    from gguf.quants import dequantize

    from specchat.catalog.gguf_file import copy_gguf

    originals = {t.name: t for t in gguf.GGUFReader(source).tensors}
    reader = gguf.GGUFReader(laid)
    tensors = []
    redone = 0
    for i, t in enumerate(reader.tensors):
        data = t.data
        original = originals.get(t.name)
        if t.tensor_type == gguf.GGMLQuantizationType.Q4_0 and original is not None:
            try:
                weights = dequantize(original.data, original.tensor_type)
            except NotImplementedError:
                weights = None
            if weights is not None:
                cols = weights.shape[-1]
                data = q4_0_rows(weights.reshape(-1, cols)).reshape(t.data.shape)
                redone += 1
        tensors.append((t.name, data, t.tensor_type))
        if progress is not None:
            progress(i + 1, len(reader.tensors))
    copy_gguf(reader, out, tensors)
    return redone
