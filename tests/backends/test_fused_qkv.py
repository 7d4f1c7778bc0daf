"""optimize/fused_qkv.py: a model whose layers' Q, K and V are stacked into llama.cpp's fused
`attn_qkv` gives the logits of the file it came from, as F32 and in the Q4_0 layout `models
optimize` writes (whose matrices take the repacked kernels), over a batch and a step; a graph
that has no fused tensor is left as it is."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from support.tinymodels import write_tiny_mamba

from specchat.catalog.layout import Q4_0
from specchat.optimize.fused_qkv import can_fuse_qkv, write_fused_qkv

llama_cpp = pytest.importorskip("llama_cpp")

PREFIX = [5, 17, 42, 101, 7, 250, 3, 64, 128, 9]


def _logits(path, prefix: list[int], step: int) -> np.ndarray:
    """The rows of `prefix` as one batch, then of `step` alone."""
    model = llama_cpp.Llama(str(path), n_ctx=128, logits_all=True, n_threads=2, verbose=False)
    model.eval(prefix)
    model.eval([step])
    rows = np.array(model.scores[:model.n_tokens])
    model.close()
    return rows


@pytest.mark.parametrize("layout", ["F32", "Q4_0"])
def test_stacked_q_k_v_give_the_logits_of_the_separate_matrices(tiny, tmp_path, layout):
    from specchat.optimize.quantize import quantize

    source = tiny.target
    if layout == "Q4_0":
        source = tmp_path / "tiny.q4_0.gguf"
        quantize(tiny.target, source, Q4_0)
    fused = tmp_path / "tiny.qkv.gguf"
    assert can_fuse_qkv(source)
    write_fused_qkv(source, fused)
    names = {t.name for t in gguf.GGUFReader(fused).tensors}
    assert "blk.0.attn_qkv.weight" in names
    assert not [n for n in names if any(f".attn_{p}." in n for p in "qkv")]
    assert np.array_equal(_logits(source, PREFIX, 33), _logits(fused, PREFIX, 33))


def test_a_graph_without_a_fused_attention_input_is_left_alone(tmp_path):
    mamba = tmp_path / "tiny-mamba.gguf"
    write_tiny_mamba(mamba)
    assert not can_fuse_qkv(mamba)
