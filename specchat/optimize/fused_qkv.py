"""One attention input matrix a layer: each layer's Q, K and V matrices (and biases) stacked
into llama.cpp's fused `attn_qkv`, which its llama and qwen2 graphs take in their place.

A layer then runs one matrix product and one bias add where it ran three of each, on the same
rows: every output row is the same dot product of the same weights and activations, so the
logits are the same bits. On a 2-core CPU that saves 2-5% of a pass of the 0.5B Q4_0 draft
and about 1% of the 1.5B target's (docs/lab/2026-12-04-one-attention-input-matrix-a-layer.md):
its K and V matrices have 128 rows each, and a product that small pays its thread hand-offs
and its activations' quantization more than its weights. The rows are copied as they lie (a
quantized row is whole blocks of its own).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FUSED_ARCHITECTURES = ("llama", "qwen2")
"""Graphs whose tensors load a fused `attn_qkv` (llama.cpp's create_tensor_qkv) that specchat
has checked for the same logits (tests/backends/test_fused_qkv.py)."""
_PARTS = ("q", "k", "v")


def _groups(reader: Any) -> dict[str, list[Any]]:
    """Each `blk.N.attn_{q,k,v}.{weight,bias}` triple by its fused name, where all three are
    there in one type."""
    tensors = {t.name: t for t in reader.tensors}
    groups: dict[str, list[Any]] = {}
    for name in tensors:
        if ".attn_q." not in name:
            continue
        names = [name.replace(".attn_q.", f".attn_{p}.") for p in _PARTS]
        if all(n in tensors for n in names):
            parts = [tensors[n] for n in names]
            if len({t.tensor_type for t in parts}) == 1:
                groups[name.replace(".attn_q.", ".attn_qkv.")] = parts
    return groups


def can_fuse_qkv(path: Path) -> bool:
    """Whether the model's graph takes a fused `attn_qkv` and its layers have Q, K and V
    matrices of one type to stack."""
    import gguf

    reader = gguf.GGUFReader(path)
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    return arch in FUSED_ARCHITECTURES and any(n.endswith(".weight") for n in _groups(reader))


def write_fused_qkv(source: Path, out: Path) -> None:
    """Write `source` to `out` with each layer's Q, K and V stacked into `attn_qkv` (weights
    and, where the layer has them, biases), in the tensor order of the source."""
    import gguf
    import numpy as np

    from specchat.catalog.gguf_file import copy_gguf

    reader = gguf.GGUFReader(source)
    groups = _groups(reader)
    stacked = {t.name: fused for fused, parts in groups.items() for t in parts}
    tensors = []
    for t in reader.tensors:
        fused = stacked.get(t.name)
        if fused is None:
            tensors.append((t.name, t.data, t.tensor_type))
        elif ".attn_q." in t.name:  # the triple goes where its Q was
            parts = groups[fused]
            tensors.append((fused, np.concatenate([p.data for p in parts]), t.tensor_type))
    copy_gguf(reader, out, tensors)
