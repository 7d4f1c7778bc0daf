"""specchat's patches to llama.cpp (patches/llama.cpp): they apply to the pinned sdist that
install.sh builds the wheel from; the Q4_0 GEMM they change (the AVX2 kernel, or on an
AVX-512 build its 512-bit form) gives a batch the logits of the same tokens taken one at a time;
the one-row GEMV (changed on AVX2 builds) gives a step the logits of the weights as llama.cpp
holds them unpacked; and a model with a hot-vocabulary output scores those token ids as the
whole output layer does and no others."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specchat import llama_tools
from specchat.catalog.layout import Q4_0
from specchat.errors import SpecchatError

llama_cpp = pytest.importorskip("llama_cpp")


def test_the_patches_apply_to_the_pinned_sdist_and_mark_it(tmp_path):
    root = llama_tools.unpack(llama_cpp.__version__, tmp_path)
    assert (root / llama_tools.PATCHED).read_text() == llama_tools.patches_key()
    repack = root / "vendor/llama.cpp/ggml/src/ggml-cpu/arch/x86/repack.cpp"
    source = repack.read_text()
    assert "gemm_q4_0_8x8_q8_0_rows4_avx2" in source
    assert "gemm_q4_0_8x8_q8_0_rows4_avx512" in source
    assert "gemv_q4_0_8x8_q8_0_unsigned_avx2" in source
    assert "every row of a Q4_0 batch goes to the unsigned four-row kernel" in source
    assert "create_tensor_output_hot" in (root / "vendor/llama.cpp/src/llama-model.cpp").read_text()


def test_a_patch_left_out_is_not_applied_and_the_tree_not_marked_as_the_full_build(tmp_path):
    """benchmarks/gemm_patch.py --without 0005 times a build of every patch but one against the
    wheel: that source must lack the patch and must not pass for the patched tools' source."""
    root = llama_tools.unpack(llama_cpp.__version__, tmp_path, leave_out=["0005"])
    source = (root / "vendor/llama.cpp/ggml/src/ggml-cpu/arch/x86/repack.cpp").read_text()
    assert "gemv_q4_0_8x8_q8_0_unsigned_avx2" in source
    assert "gemv_q4_0_8x8_q8_0_unsigned_rows_avx2" not in source
    assert not (root / llama_tools.PATCHED).exists()
    assert llama_tools.patches_key(["0005"]) != llama_tools.patches_key()


def test_a_patch_that_does_not_apply_is_named(tmp_path, monkeypatch):
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "0001-wrong.patch").write_text(
        "--- a/CMakeLists.txt\n+++ b/CMakeLists.txt\n@@ -1,1 +1,1 @@\n-no such line\n+nor this\n")
    monkeypatch.setattr(llama_tools, "PATCHES", patches)
    with pytest.raises(SpecchatError, match="0001-wrong.patch does not apply"):
        llama_tools.unpack(llama_cpp.__version__, tmp_path / "src")


@pytest.fixture(scope="module")
def q4_0_file(tiny, tmp_path_factory):
    """The tiny target re-laid in Q4_0 by llama.cpp's quantizer."""
    from specchat.backends.quantize import quantize

    out = tmp_path_factory.mktemp("q4_0") / "tiny.q4_0.gguf"
    quantize(tiny.target, out, Q4_0)
    return out


@pytest.fixture(scope="module", params=[1, 2], ids=["1-thread", "2-threads"])
def q4_0_model(request, q4_0_file):
    """The tiny Q4_0 target loaded: its 64- and 128-wide matrices are repacked, so a batch of 4
    rows or more runs the patched four-row GEMM (on AVX2 every row of it, 0006; with AVX-512 the
    rows below a multiple of 16), and on AVX2 the one to three rows left over (or a batch of 2 or
    3) run the GEMV of 0004-0005 together, against single tokens one row at a time. Each
    thread takes chunks of the matrix's columns: on one thread every matrix is one chunk a
    multiple of 16 wide (the AVX-512 kernel's sixteen columns a pass), on two the
    64-wide ones come in chunks of 8, which keep llama.cpp's own path there."""
    return llama_cpp.Llama(str(q4_0_file), n_ctx=256, logits_all=True, n_threads=request.param,
                           verbose=False)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=st.lists(st.integers(0, 255), min_size=1, max_size=20),
       batch=st.lists(st.integers(0, 255), min_size=2, max_size=40))
def test_a_q4_0_batch_gives_the_logits_of_its_tokens_one_at_a_time(q4_0_model, prefix, batch):
    model = q4_0_model
    model.reset()
    model.eval(prefix)
    model.eval(batch)
    together = np.array(model.scores[len(prefix):model.n_tokens])
    model.reset()
    model.eval(prefix)
    for token in batch:
        model.eval([token])
    alone = np.array(model.scores[len(prefix):model.n_tokens])
    # llama.cpp's own batch rounding (attention over another shape, then activations rounded
    # to 8 bits) moves a logit by up to about 0.5% of the largest, with the patch or without;
    # a wrong dot product moves it by tens of percent
    assert np.abs(together - alone).max() <= 0.02 * np.abs(alone).max()


def _steps(path, tokens: list[int], repack: bool, monkeypatch) -> np.ndarray:
    """The logits of `tokens` fed one at a time (the one-row path), with llama.cpp's repacked
    weights (its GEMV kernels) or with the weights as the file holds them (ggml's dot products)."""
    plain = llama_cpp.llama_cpp.llama_model_default_params

    def params():
        p = plain()
        p.use_extra_bufts = repack
        return p

    with monkeypatch.context() as m:
        m.setattr(llama_cpp.llama_cpp, "llama_model_default_params", params)
        model = llama_cpp.Llama(str(path), n_ctx=128, logits_all=True, n_threads=2, verbose=False)
    for token in tokens:
        model.eval([token])
    rows = np.array(model.scores[:model.n_tokens])
    model.close()
    return rows


def test_a_q4_0_step_gives_the_logits_of_the_unpacked_weights(q4_0_file, monkeypatch):
    """The repacked Q4_0 GEMV (patches/llama.cpp/0004 on AVX2) sums each block's integer dot
    product exactly, as ggml's own Q4_0 dot product does over the unpacked weights; the two
    differ only in the order they add the blocks' float products. A wrong correction for the
    unsigned nibbles (8 * the activations' sum) moves the logits by tens of percent."""
    tokens = [5, 17, 42, 101, 7, 250, 3, 64, 128, 9]
    packed = _steps(q4_0_file, tokens, True, monkeypatch)
    unpacked = _steps(q4_0_file, tokens, False, monkeypatch)
    assert np.abs(packed - unpacked).max() <= 1e-3 * np.abs(unpacked).max()


def test_a_hot_output_scores_its_rows_as_the_full_layer_and_the_rest_not_at_all(tiny, tmp_path):
    """patches/llama.cpp/0003: a Q4_0 draft with `output_hot` (what `specchat models optimize`
    makes of a draft, backends/hot_vocab.py) scores its first token ids with the full output
    layer's rows, and every other id -inf. The tiny output matrix (265 rows, not a multiple of
    8) is not repacked where its 96 hot rows are, so the two take different kernels and agree to
    float rounding; the 0.5B draft's two (both repacked) gave the same bits."""
    from specchat.backends.hot_vocab import write_hot_draft
    from specchat.backends.quantize import quantize

    full_path, hot_path = tmp_path / "tiny-draft.q4_0.gguf", tmp_path / "tiny-draft.hot.gguf"
    quantize(tiny.draft, full_path, Q4_0)
    write_hot_draft(full_path, hot_path, 96)
    rows = {}
    for name, path in (("full", full_path), ("hot", hot_path)):
        model = llama_cpp.Llama(str(path), n_ctx=128, logits_all=True, n_threads=2, verbose=False)
        model.eval([5, 17, 42, 101, 7])
        rows[name] = np.array(model.scores[:model.n_tokens])
        model.close()
    assert rows["hot"].shape == rows["full"].shape
    np.testing.assert_allclose(rows["hot"][:, :96], rows["full"][:, :96], rtol=1e-5, atol=1e-5)
    assert np.isneginf(rows["hot"][:, 96:]).all()
