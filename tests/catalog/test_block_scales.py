"""Q4_0 block scales by least squares: never further from the weights than llama.cpp's own
rounding, bytes that any Q4_0 reader reads back as the levels chosen, and a re-laid file that
llama.cpp loads and that lies closer to its source than llama.cpp's quantizer left it."""

from __future__ import annotations

import gguf
import numpy as np
from gguf.quants import dequantize, quantize
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from specchat.catalog.layout import Q4_0
from specchat.optimize.block_scales import least_squares_q4_0, pack_q4_0, q4_0_rows, rescale

Q = gguf.GGMLQuantizationType.Q4_0

weights = st.one_of(st.just(0.0), st.floats(2.0 ** -100, 4, width=32),
                    st.floats(-4, -(2.0 ** -100), width=32))
"""A model's weights: zero, or far from float32's smallest (where llama.cpp's inverse scale
overflows and its levels are undefined)."""
blocks = arrays(np.float32, st.tuples(st.integers(1, 8), st.just(32)), elements=weights)


def squared_error(x: np.ndarray, rounded: np.ndarray) -> np.ndarray:
    return ((x.astype(np.float64) - rounded.astype(np.float64)) ** 2).sum(axis=1)


@settings(max_examples=300, deadline=None)
@given(blocks)
def test_no_block_is_further_from_its_weights_than_llama_cpps_rounding(x):
    d, q = least_squares_q4_0(x)
    ours = squared_error(x, d.astype(np.float32)[:, None] * q)
    theirs = squared_error(x, dequantize(quantize(x, Q), Q))
    scale = (x.astype(np.float64) ** 2).sum(axis=1)
    assert np.all(ours <= theirs + 1e-6 * scale + 1e-12)


@settings(max_examples=100, deadline=None)
@given(blocks)
def test_the_bytes_read_back_as_the_scales_and_levels_chosen(x):
    d, q = least_squares_q4_0(x)
    assert q.min() >= -8 and q.max() <= 7
    read = dequantize(pack_q4_0(d, q), Q)
    assert np.array_equal(read, d.astype(np.float32)[:, None] * q.astype(np.float32))


def test_least_squares_cuts_the_error_of_a_matrix_llama_cpp_rounds():
    """Gaussian weights, as in a model's matrices: a fifth less squared error, or near it."""
    w = (np.random.default_rng(7).standard_normal((64, 256)) * 0.02).astype(np.float32)
    ours = dequantize(q4_0_rows(w), Q)
    theirs = dequantize(quantize(w, Q), Q)
    assert ((ours - w) ** 2).sum() < 0.9 * ((theirs - w) ** 2).sum()


def test_a_re_laid_file_lies_closer_to_its_source_and_llama_cpp_loads_it(tiny, tmp_path):
    from specchat.backends.llamacpp import LlamaCppBackend
    from specchat.optimize.quantize import quantize as lay

    laid, out = tmp_path / "laid.gguf", tmp_path / "rescaled.gguf"
    lay(tiny.target, laid, Q4_0)
    assert rescale(tiny.target, laid, out) > 0
    source = {t.name: t for t in gguf.GGUFReader(tiny.target).tensors}
    theirs = {t.name: t for t in gguf.GGUFReader(laid).tensors}
    ours = {t.name: t for t in gguf.GGUFReader(out).tensors}
    assert list(ours) == list(theirs)
    closer = 0
    for name, t in ours.items():
        assert t.tensor_type == theirs[name].tensor_type and t.data.shape == theirs[name].data.shape
        if t.tensor_type != Q:
            assert np.array_equal(t.data, theirs[name].data)
            continue
        w = dequantize(source[name].data, source[name].tensor_type)
        mine, llama = dequantize(t.data, Q), dequantize(theirs[name].data, Q)
        assert ((mine - w) ** 2).sum() <= ((llama - w) ** 2).sum()
        closer += ((mine - w) ** 2).sum() < ((llama - w) ** 2).sum()
    assert closer > 0
    model = LlamaCppBackend(out, n_ctx=64, n_threads=1)
    try:
        rows = model.eval(model.tokenize("hello world"), 0)
        assert np.isfinite(rows).all()
    finally:
        model.close()
