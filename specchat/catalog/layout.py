"""CPU layouts: which weight format this machine's llama.cpp build has fast kernels for, and the
record of a model re-laid in it (`specchat models optimize`).

llama.cpp's CPU backend repacks some formats into interleaved rows at load time
(ggml-cpu/repack.cpp) and runs them through kernels that take several rows of a batch at once.
On x86 with AVX2 that is Q4_0, IQ4_NL, Q4_K and MXFP4, not Q5_0, Q6_K or Q8_0, which make up much
of the shipped Q4_K_M files; on ARM with dot-product instructions Q4_0 among others. A model
whose every matrix is Q4_0 runs on those kernels alone, and its verify batches cost far less
than their tokens one at a time where they fit the kernels: 4 and 8 tokens on AVX-512 (about
1.4 and 2.4 steps), 2 and 3 on AVX2 with specchat's patches (1.1 and 1.5; docs/lab/
has the curves). On a GPU the layout is
left as it is.

The record of each derived model lives beside the models, in `derived.toml` in the models
folder, so the catalog knows what it came from, what rounding it adds, and what it measured.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import tomli_w

from specchat.cpu import BUSY_SHARE

DERIVED_FILE = "derived.toml"
QUALITY_TOKENS = 48
"""Tokens of each greedy reply the quality check compares, original against re-laid."""


@dataclass(frozen=True)
class Layout:
    name: str
    """The weight type every matrix gets, as llama.cpp names it."""
    ftype: int
    """llama.cpp's LLAMA_FTYPE_MOSTLY_* number for it."""
    suffix: str
    """What the derived file's name ends with: `<source>.<suffix>.gguf`."""


Q4_0 = Layout("Q4_0", 2, "cpu-q4_0")
LEAST_SQUARES = "least squares"
"""Derived.scales of a Q4_0 file whose block scales were fitted to the source's weights."""


def system_flags(system_info: str) -> dict[str, bool]:
    """`llama_print_system_info()`'s `NAME = 1 |` pairs as flags (what the build runs with)."""
    return {name: value == "1" for name, value in re.findall(r"(\w+) = (\d)", system_info)}


def choose_layout(system_info: str, gpu_offload: bool) -> tuple[Layout | None, str]:
    """The layout to make for this build and machine, or None, with the reason either way.

    Q4_0 where the build repacks it for a kernel that takes rows in groups: AVX2 on x86, dot
    product (or int8 matrix multiply) on ARM. Nothing where the models run on a GPU, or where no
    repacked kernel exists (the original is then as fast as any 4-bit layout)."""
    if gpu_offload:
        return None, ("this llama.cpp runs models on a GPU, where the verify batch costs about a "
                      "step in any layout: the models are left as they are")
    flags = system_flags(system_info)
    if flags.get("REPACK") is False:
        return None, "this llama.cpp was built without repacked CPU kernels (GGML_CPU_REPACK)"
    if flags.get("AVX512"):
        return Q4_0, "x86 with AVX-512: llama.cpp repacks Q4_0 into 8-row interleaved blocks"
    if flags.get("AVX2"):
        return Q4_0, "x86 with AVX2: llama.cpp repacks Q4_0 into 8-row interleaved blocks"
    if flags.get("NEON") and (flags.get("DOTPROD") or flags.get("MATMUL_INT8")):
        return Q4_0, "ARM with dot-product instructions: llama.cpp repacks Q4_0 into 4-row blocks"
    return None, ("this CPU has no repacked llama.cpp kernel for a 4-bit layout (it needs AVX2 "
                  "or ARM dot-product instructions): the models are left as they are")


@dataclass
class Derived:
    """A model re-laid for this CPU: where it came from and what it measured."""

    name: str
    """Its catalog name: the source's name and the layout's suffix."""
    source: str
    """The catalog name (or file stem) of the model it was made from."""
    source_file: str
    source_sha256: str
    source_quant: str
    layout: str
    file: str
    size: int
    sha256: str
    role: str = ""
    """`target` or `draft` when it was made for the default pair's model of that role."""
    rounding: str = ""
    """What the conversion adds: a second rounding of weights that were already quantized."""
    scales: str = ""
    """How each block's scale was chosen: LEAST_SQUARES (optimize/block_scales.py), or "" for
    llama.cpp's quantizer alone (the files made before; `models optimize --force` makes them
    again)."""
    made_s: float = 0.0
    """Seconds the conversion took."""
    hot_tokens: int = 0
    """A draft that scores only its first this many token ids, the most frequent
    (optimize/hot_vocab.py); 0: the whole vocabulary."""
    fused_qkv: bool = False
    """Each layer's Q, K and V matrices stacked into one (optimize/fused_qkv.py): the same
    logits, a little faster (False for the files made before: `models optimize --force`)."""
    cost: dict[str, Any] = field(default_factory=dict)
    """step_ms and verify_steps (n = 1, 2, ...) of the source and of this file, timed here."""
    quality: dict[str, Any] = field(default_factory=dict)
    """For a target: KL divergence from the source's next-token distributions over the prompt
    suite, and the greedy replies that changed (empty for a draft: its layout changes only
    speed)."""


def derived_path(models_dir: Path) -> Path:
    return models_dir / DERIVED_FILE


def load_derived(models_dir: Path) -> dict[str, Derived]:
    """The records in the models folder; an unreadable file or record is skipped (the files
    themselves stay usable as plain GGUFs)."""
    path = derived_path(models_dir)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, ValueError):
        return {}
    out = {}
    for name, record in raw.get("derived", {}).items():
        try:
            out[name] = Derived(**record)
        except TypeError:
            continue
    return out


def save_derived(models_dir: Path, record: Derived) -> None:
    """Add or replace one record (written to a temporary file, then moved into place)."""
    records = load_derived(models_dir)
    records[record.name] = record
    path = derived_path(models_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(tomli_w.dumps({"derived": {n: asdict(r) for n, r in records.items()}}),
                   encoding="utf-8")
    os.replace(tmp, path)


def derived_of(models_dir: Path, source: str) -> Derived | None:
    """The installed record made from `source` (a catalog name), if its file is there."""
    for record in load_derived(models_dir).values():
        if record.source == source and (models_dir / record.file).is_file():
            return record
    return None


class TimedCurve(NamedTuple):
    """The verify curve `specchat models optimize` timed for a file, and the step it was timed
    at."""

    shape: tuple[float, ...] = ()
    """Each batch size's cost in plain steps (n = 1, 2, ...)."""
    step_s: float | None = None
    """The plain step, in seconds, when it was timed."""


def known_curve(models_dir: Path, path: Path, build: str) -> TimedCurve:
    """The curve timed for this file, as the derived model or as its source, on this llama.cpp
    `build`; empty where none was timed on it (another build's kernels price the batches
    otherwise) or where it was timed while other programs took the CPU (their load's curve, not
    this machine's)."""
    for record in load_derived(models_dir).values():
        if record.cost.get("build") != build:
            continue
        for file, side in ((record.file, "derived"), (record.source_file, "source")):
            timed = record.cost.get(side, {})
            if file == path.name and (timed.get("others_cpu") or 0.0) < BUSY_SHARE:
                step_ms = timed.get("step_ms")
                return TimedCurve(tuple(timed.get("verify_steps", ())),
                                  None if step_ms is None else step_ms / 1000)
    return TimedCurve()


def known_shape(models_dir: Path, path: Path, build: str) -> tuple[float, ...]:
    """`known_curve`'s shape alone."""
    return known_curve(models_dir, path, build).shape


def quality_text(record: Derived) -> str:
    """What the layout does to the replies, in one line."""
    q = record.quality
    if record.role == "draft" or not q:
        hot = (f" (scoring only its {record.hot_tokens:,} most frequent tokens)"
               if record.hot_tokens else "")
        return f"as a draft its layout{hot} changes only speed, never the reply"
    return (f"KL {q['kl_mean']:.4f} nats a token from the original (p99 {q['kl_p99']:.3f}), "
            f"top token the same at {q['top1_same']:.1%}; {q['replies_changed']} of "
            f"{q['prompts']} greedy replies differ ({q['tokens']} tokens each)")


def cost_text(cost: dict[str, Any]) -> str:
    """A step and the verify batches that decide speculation, as timed here."""
    steps = cost.get("verify_steps", [])
    batches = ", ".join(f"{n}: {steps[n - 1]:.1f}" for n in (4, 5, 8) if n <= len(steps))
    return f"step {cost.get('step_ms', 0):.0f} ms, verify {batches} steps"


def layout_note(records: dict[str, Derived], path: Path, role: str) -> str:
    """For a model menu: what `specchat models optimize` measured of this file (as the
    optimized one or as its original) among `records` (`load_derived`), or nothing."""
    for record in records.values():
        if path.name == record.file:
            what = ("the reply is the target's whatever the draft's layout" if role == "draft"
                    else quality_text(record))
            return (f"optimized {record.layout} for this CPU (from {record.source_quant}): "
                    f"{cost_text(record.cost.get('derived', {}))}; {what}")
        if path.name == record.source_file:
            return (f"original {record.source_quant}: {cost_text(record.cost.get('source', {}))}"
                    f"; {record.name} is its {record.layout} layout")
    return ""
