"""`specchat models optimize`: the layout chosen from the build's kernels, the file re-laid by
llama.cpp's quantizer beside the original, its record, and `default` resolving to it."""

from __future__ import annotations

import tomllib

import gguf
import pytest
from support.processes import specchat

from specchat.catalog import compat
from specchat.catalog.catalog import Catalog, CatalogModel, resolve_model
from specchat.catalog.fetch import sha256_file
from specchat.catalog.layout import Derived, choose_layout, known_curve, known_shape, save_derived
from specchat.config import Config
from specchat.native.llama_tools import installed_build

X86_AVX2 = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | REPACK = 1 |"
X86_AVX512 = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 1 | REPACK = 1 |"
X86_OLD = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | REPACK = 1 |"
ARM = "CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 | DOTPROD = 1 | REPACK = 1 |"
NO_REPACK = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | REPACK = 0 |"


@pytest.mark.parametrize(("info", "gpu", "layout", "why"), [
    (X86_AVX2, False, "Q4_0", "x86 with AVX2"),
    (X86_AVX512, False, "Q4_0", "x86 with AVX-512"),
    (ARM, False, "Q4_0", "ARM"),
    (X86_AVX2, True, None, "GPU"),
    (X86_OLD, False, None, "AVX2 or ARM"),
    (NO_REPACK, False, None, "without repacked"),
])
def test_the_layout_follows_the_kernels_the_build_has(info, gpu, layout, why):
    chosen, reason = choose_layout(info, gpu)
    assert (chosen.name if chosen else None) == layout
    assert why in reason


def test_optimize_re_lays_a_model_beside_it_and_records_what_it_measured(tiny, tmp_path):
    proc = specchat("models", "optimize", str(tiny.target), "--quality-tokens", "8",
                    tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    models = tmp_path / "models"
    out = models / "tiny-target.cpu-q4_0.gguf"
    assert "layout Q4_0" in proc.stdout and out.is_file()
    assert compat.header(out).quantization == "Q4_0"
    assert compat.check(tiny.target, out).ok  # the same vocabulary: it can draft for it
    record = tomllib.loads((models / "derived.toml").read_text())["derived"]["tiny-target.cpu-q4_0"]
    assert record["sha256"] == sha256_file(out) and record["size"] == out.stat().st_size
    assert record["source"] == "tiny-target" and record["source_quant"] == "ALL_F32"
    assert record["source_sha256"] == sha256_file(tiny.target)
    assert "second rounding" in record["rounding"] and record["made_s"] >= 0
    assert record["scales"] == "least squares" and "least squares" in record["rounding"]
    assert record["fused_qkv"] is True  # one attention input matrix a layer (same logits)
    assert "blk.0.attn_qkv.weight" in {t.name for t in gguf.GGUFReader(out).tensors}
    for side in ("source", "derived"):
        steps = record["cost"][side]["verify_steps"]
        assert len(steps) == 9 and steps[0] == 1.0 and record["cost"][side]["step_ms"] > 0
    quality = record["quality"]
    assert quality["prompts"] == 10 and quality["positions"] > 0
    assert quality["kl_mean"] >= 0 and 0 <= quality["top1_same"] <= 1
    assert 0 <= quality["replies_changed"] <= 10 == quality["prompts"]
    assert len(quality["changed"]) == quality["replies_changed"]
    assert "KL" in proc.stdout and "greedy replies" in proc.stdout
    assert record["cost"]["build"] == installed_build()
    made = (models / "derived.toml").read_text()
    (models / "derived.toml").write_text(made.replace('scales = "least squares"\n', ""))
    again = specchat("models", "optimize", str(tiny.target), tmp_path=tmp_path)
    assert again.returncode == 0 and "already made" in again.stdout
    assert "llama.cpp's own" in again.stdout  # a file made before the scales were fitted
    # timed on another llama.cpp build: timed again, the file and its quality kept
    text = (models / "derived.toml").read_text()
    (models / "derived.toml").write_text(text.replace(f'build = "{installed_build()}"',
                                                      'build = "0.0.1+unpatched"'))
    third = specchat("models", "optimize", str(tiny.target), tmp_path=tmp_path)
    assert third.returncode == 0 and "timed on llama.cpp 0.0.1+unpatched" in third.stdout
    retimed = tomllib.loads((models / "derived.toml").read_text())["derived"]["tiny-target.cpu-q4_0"]
    assert retimed["cost"]["build"] == installed_build()
    assert len(retimed["cost"]["derived"]["verify_steps"]) == 9
    assert retimed["quality"] == quality and retimed["sha256"] == record["sha256"]


def test_an_unknown_model_is_one_line(tmp_path):
    proc = specchat("models", "optimize", "no-such-model", tmp_path=tmp_path)
    assert proc.returncode == 2 and "unknown model" in proc.stderr and "Traceback" not in proc.stderr


def test_default_resolves_to_the_optimized_file_and_the_name_to_the_original(
        tiny, tmp_path, monkeypatch):
    models = tmp_path / "models"
    models.mkdir()
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(models))
    original = models / "tiny-target.gguf"
    original.write_bytes(tiny.target.read_bytes())
    derived = models / "tiny-target.cpu-q4_0.gguf"
    derived.write_bytes(tiny.target.read_bytes())
    entry = CatalogModel("tiny", "tiny", "1M", "F32", original.name, original.stat().st_size, "")
    catalog = Catalog({"tiny": entry}, {"default": {"target": "tiny", "draft": "tiny"}})
    config = Config(tmp_path / "config.toml")
    assert resolve_model("default", "target", catalog, config) == original  # none made yet
    save_derived(models, Derived(
        name=derived.stem, source="tiny", source_file=original.name, source_sha256="",
        source_quant="F32", layout="Q4_0", file=derived.name, size=derived.stat().st_size,
        sha256="", cost={"build": "b1", "source": {"verify_steps": [1.0, 2.0]},
                         "derived": {"verify_steps": [1.0, 1.5], "step_ms": 20.0}}))
    assert resolve_model("default", "target", catalog, config) == derived
    assert resolve_model("tiny", "target", catalog, config) == original
    assert known_shape(models, derived, "b1") == (1.0, 1.5)
    assert known_shape(models, original, "b1") == (1.0, 2.0)
    assert known_shape(models, derived, "b2") == ()  # timed on another build
    assert known_curve(models, derived, "b1").step_s == 0.020  # the step the curve was timed at
    assert known_curve(models, original, "b1").step_s is None
    derived.unlink()  # a record whose file is gone does not count
    assert resolve_model("default", "target", catalog, config) == original


def test_a_layout_timed_beside_a_busy_machine_is_timed_again_and_not_started_from(
        tiny, tmp_path, monkeypatch):
    """The probe faked busy once, then quiet: the file is timed again and the quiet timing
    kept; faked busy every time: the last timing is kept, marked, and the policy's starting
    curve (known_shape) leaves it out."""
    from specchat import cpu
    from specchat.backends.llamacpp import LlamaCppBackend
    from specchat.optimize import measure

    model = LlamaCppBackend(tiny.target, n_ctx=512, n_threads=1)
    shares = iter([0.9, 0.05])
    monkeypatch.setattr(cpu, "others_share", lambda start, end: next(shares))
    steps: list[str] = []
    cost = measure.quiet_cost(model, steps.append)
    assert cost["others_cpu"] == 0.05 and len(steps) == 1 and "90% of the CPU" in steps[0]
    monkeypatch.setattr(cpu, "others_share", lambda start, end: 0.9)
    busy = measure.quiet_cost(model, steps.append)
    model.close()
    assert busy["others_cpu"] == 0.9 and len(steps) == 1 + measure.TIMING_TRIES - 1
    models = tmp_path / "models"
    for name, timed in (("quiet", cost), ("busy", busy)):
        save_derived(models, Derived(
            name=name, source=name, source_file=f"{name}.gguf", source_sha256="",
            source_quant="F32", layout="Q4_0", file=f"{name}.q4_0.gguf", size=1, sha256="",
            cost={"build": "b1", "source": timed, "derived": timed}))
    assert known_shape(models, tmp_path / "quiet.q4_0.gguf", "b1") == tuple(cost["verify_steps"])
    assert known_shape(models, tmp_path / "busy.q4_0.gguf", "b1") == ()
