"""specchat's patches to llama.cpp (patches/llama.cpp): they apply to the pinned sdist that
install.sh builds the wheel from; this build has the kernels this CPU's instruction set calls
for; the Q4_0 GEMM they change (one 256-bit kernel on AVX2 and AVX-512 builds alike) gives
a batch of every size from 1 to 40 the logits of the weights as the file holds them (a path no
patch touches), on one thread and on two; the one-row GEMV (changed on AVX2 and AVX-512 builds)
gives a step the logits of the weights as llama.cpp holds them unpacked; and a model with a
hot-vocabulary output scores those token ids as the whole output layer does and no others."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.checks import missing

from specchat.backends.repack import model_params
from specchat.catalog.layout import Q4_0, system_flags
from specchat.errors import SpecchatError
from specchat.native import llama_tools

llama_cpp = pytest.importorskip("llama_cpp")
ROOT = Path(__file__).resolve().parents[2]


def test_the_patches_apply_to_the_pinned_sdist_and_mark_it(tmp_path):
    root = llama_tools.unpack(llama_cpp.__version__, tmp_path)
    assert (root / llama_tools.PATCHED).read_text() == llama_tools.patches_key(tools=True)
    simple = root / "vendor/llama.cpp/examples/speculative-simple/speculative-simple.cpp"
    assert "common_log_pause(common_log_main());" in simple.read_text()  # 0009's
    repack = root / "vendor/llama.cpp/ggml/src/ggml-cpu/arch/x86/repack.cpp"
    source = repack.read_text()
    assert "gemm_q4_0_8x8_q8_0_rows4_avx2" in source
    assert "gemm_q4_0_8x8_q8_0_rows4_avx512" not in source  # 0002's, retired by 0008
    assert "gemv_q4_0_8x8_q8_0_unsigned_avx2" in source
    assert "every row of a Q4_0 batch goes to the unsigned four-row" in source
    assert "create_tensor_output_hot" in (root / "vendor/llama.cpp/src/llama-model.cpp").read_text()


def test_a_patch_of_llama_cpps_examples_only_keeps_the_wheels_key_and_changes_the_tools():
    """0009 changes only llama-speculative-simple: the wheel's key (and the timings kept with
    it) stays what it was without the patch; the tools' build is another."""
    only = [p.name[:4] for p in llama_tools.patches() if llama_tools.examples_only(p)]
    assert only == ["0009"]
    assert llama_tools.patches_key() == llama_tools.patches_key(["0009"])
    assert llama_tools.patches_key(tools=True) != llama_tools.patches_key()
    assert llama_tools.patches_key(["0009"], tools=True) == llama_tools.patches_key()


def test_a_patch_left_out_is_not_applied_and_the_tree_not_marked_as_the_full_build(tmp_path):
    """benchmarks/gemm_patch.py --without 0008 times a build of every patch but one against the
    wheel: that source must lack the patch and must not pass for the patched tools' source."""
    root = llama_tools.unpack(llama_cpp.__version__, tmp_path, leave_out=["0008"])
    source = (root / "vendor/llama.cpp/ggml/src/ggml-cpu/arch/x86/repack.cpp").read_text()
    assert "gemv_q4_0_8x8_q8_0_unsigned_rows_avx2" in source  # 0005's
    assert "gemm_q4_0_8x8_q8_0_rows4_avx512" in source  # 0002's, which 0008 retires
    assert not (root / llama_tools.PATCHED).exists()
    assert llama_tools.patches_key(["0008"]) != llama_tools.patches_key()


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
    from specchat.optimize.quantize import quantize

    out = tmp_path_factory.mktemp("q4_0") / "tiny.q4_0.gguf"
    quantize(tiny.target, out, Q4_0)
    return out


def _cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        return set(next(line for line in f if line.startswith("flags")).split(":")[1].split())


def test_this_build_has_the_kernels_its_patches_are_meant_for():
    """A build without the repacked kernels, or without the instruction set this CPU has, would
    leave every Q4_0 patch test green while no patched kernel ran."""
    from specchat.backends.llamacpp import system_info

    built = {name for name, on in system_flags(system_info()[0]).items() if on}
    assert "REPACK" in built
    cpu = _cpu_flags()
    if "avx2" in cpu:
        assert "AVX2" in built  # patches 0001, 0004, 0005 and 0008 (AVX-512 builds too)
    if "avx512f" in cpu:
        assert "AVX512" in built  # the build the patches' AVX-512 measurements were made on


BATCH_TOLERANCE = 0.05
"""Of the largest logit: the repacked and unrepacked paths quantize the activations alike and
sum each block's integer dot product exactly, and part only in the float order of the blocks'
products and of attention over another shape (how far, measured: docs/divergence.md); a wrong
dot product (a lost block, a wrong unsigned correction) parts them by tens of percent."""


@pytest.mark.parametrize("threads", [1, 2], ids=["1-thread", "2-threads"])
def test_a_q4_0_batch_of_every_size_matches_the_unrepacked_weights(q4_0_file, threads):
    """Batches of 1 to 40 tokens through the repacked Q4_0 kernels (patches 0001, 0004, 0005
    and 0008 on AVX2 and AVX-512) against the same tokens through the weights as the file holds
    them: one chunk a matrix on one thread, chunks of 8 columns of the 64-wide ones on two. The
    paths must differ somewhere (else no repacked kernel ran)."""
    from specchat.backends.repack import batch_gaps

    gaps = batch_gaps(q4_0_file, threads)
    for size, gap in enumerate(gaps, 1):
        assert gap <= BATCH_TOLERANCE, f"a batch of {size}: {gap:.1%} of the largest logit"
    assert max(gaps) > 0, "the repacked and unrepacked paths gave the same bits: no repacked kernel ran"


def _steps(path, tokens: list[int], repack: bool) -> np.ndarray:
    """The logits of `tokens` fed one at a time (the one-row path), with llama.cpp's repacked
    weights (its GEMV kernels) or with the weights as the file holds them (ggml's dot products)."""
    with model_params(use_extra_bufts=int(repack)):
        model = llama_cpp.Llama(str(path), n_ctx=128, logits_all=True, n_threads=2, verbose=False)
    for token in tokens:
        model.eval([token])
    rows = np.array(model.scores[:model.n_tokens])
    model.close()
    return rows


def test_a_q4_0_step_gives_the_logits_of_the_unpacked_weights(q4_0_file):
    """The repacked Q4_0 GEMV (patches/llama.cpp/0004; 0008 on AVX-512) sums each block's integer dot
    product exactly, as ggml's own Q4_0 dot product does over the unpacked weights; the two
    differ only in the order they add the blocks' float products. A wrong correction for the
    unsigned nibbles (8 * the activations' sum) moves the logits by tens of percent."""
    tokens = [5, 17, 42, 101, 7, 250, 3, 64, 128, 9]
    packed = _steps(q4_0_file, tokens, True)
    unpacked = _steps(q4_0_file, tokens, False)
    assert np.abs(packed - unpacked).max() <= 1e-3 * np.abs(unpacked).max()


def test_a_hot_output_scores_its_rows_as_the_full_layer_and_the_rest_not_at_all(tiny, tmp_path):
    """patches/llama.cpp/0003: a Q4_0 draft with `output_hot` (what `specchat models optimize`
    makes of a draft, optimize/hot_vocab.py) scores its first token ids with the full output
    layer's rows, and every other id -inf. The tiny output matrix (265 rows, not a multiple of
    8) is not repacked where its 96 hot rows are, so the two take different kernels and agree to
    float rounding; the 0.5B draft's two (both repacked) gave the same bits."""
    from specchat.optimize.hot_vocab import write_hot_draft
    from specchat.optimize.quantize import quantize

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


def _unpatched() -> Path | None:
    from specchat.native.llama_tools import built_before

    return built_before(llama_cpp.__version__, [])


@pytest.mark.parametrize("threads", [1, 2], ids=["1-thread", "2-threads"])
def test_a_q4_0_batch_gives_the_unpatched_kernels_bits(q4_0_file, threads):
    """The patched repacked kernels against llama.cpp's own (the same sdist built without
    patches/llama.cpp: install.sh --dev builds it with `python -m benchmarks.gemm_patch
    --build`): every batch of 1 to 40 rows, the same bits, each side in its own process."""
    from specchat.native.llama_tools import before_env

    libraries = _unpatched()
    if libraries is None:
        missing("llama.cpp built without specchat's patches", ".venv/bin/python -m "
                "benchmarks.gemm_patch --build")
    sizes = ",".join(map(str, range(1, 41)))
    digests = {}
    for side, env in (("before", before_env(libraries)), ("after", None)):
        done = subprocess.run([sys.executable, "-m", "benchmarks.gemm_patch", "--side", side,
                               "--target", str(q4_0_file), "--threads", str(threads),
                               "--sizes", sizes], env=env, capture_output=True, text=True,
                              timeout=240, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-2000:]
        digests[side] = json.loads(done.stdout.strip().splitlines()[-1])["digests"]
    differ = [n for n in digests["after"] if digests["after"][n] != digests["before"][n]]
    assert len(digests["after"]) == 40 and differ == [], f"other bits at batch sizes {differ}"
