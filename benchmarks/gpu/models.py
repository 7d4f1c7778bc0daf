"""Models of a real model's shape with random weights, written in seconds, for speed checks.

How long a forward pass takes does not depend on the weights, so measuring what a GPU charges
for a 7B target and a 0.5B draft needs no download: these GGUF files have Qwen2.5's shapes (the
default pair's family) and vocabulary size, quantized weights made of random bytes with sane
scales, and one byte-level vocabulary that target and draft share (the draft passes llama.cpp's
compatibility rule). `hf_config` gives the same shape as a transformers config, for a model
initialised at random on the device. Their text is noise and a draft of one agrees with the
other at chance: they measure costs, never acceptance.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from specchat.backends.made_up import SPECIALS, Tensor, Vocabulary, write_gguf

MERGES = ("Ġ t", "h e")
_BLOCK = 1 << 24
"""Bytes of fresh randomness tiled over every tensor (writing GBs must take seconds)."""


@dataclass(frozen=True)
class Shape:
    name: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    quant: str
    """Q4_K (every 2-D weight; like Q4_K_M), Q8_0 or F16."""

    @property
    def params(self) -> int:
        e, kv = self.n_embd, self.n_embd // self.n_head * self.n_head_kv
        per_layer = e * e * 2 + e * kv * 2 + 3 * e * self.n_ff
        return self.n_layer * per_layer + 2 * self.n_vocab * e


# Qwen2.5-7B-Instruct and Qwen2.5-0.5B-Instruct (the 1.5B default target's family)
QWEN_7B = Shape("qwen2.5-7b-shape-q4_k", 3584, 28, 28, 4, 18944, 152064, "Q4_K")
QWEN_05B = Shape("qwen2.5-0.5b-shape-q8_0", 896, 24, 14, 2, 4864, 152064, "Q8_0")
# a CPU-sized pair with the same structure, for the check's --small mode
SMALL_TARGET = Shape("small-target-q8_0", 512, 6, 8, 2, 1536, 8192, "Q8_0")
SMALL_DRAFT = Shape("small-draft-q8_0", 128, 2, 4, 2, 384, 8192, "Q8_0")


def vocabulary(n_vocab: int) -> Vocabulary:
    """256 byte tokens (GPT-2's printable stand-ins), two merges, fillers, then the ChatML
    control tokens."""
    fillers = n_vocab - len(SPECIALS) - 256 - len(MERGES)
    return Vocabulary.byte_level(MERGES, [f"tok{i}" for i in range(fillers)])


class _Bytes:
    """Random bytes from one block, handed out at shifting offsets."""

    def __init__(self, seed: int) -> None:
        self.block = np.random.default_rng(seed).integers(0, 256, _BLOCK * 2, dtype=np.uint8)
        self.at = 0

    def take(self, n: int) -> np.ndarray:
        out = np.empty(n, dtype=np.uint8)
        done = 0
        while done < n:
            step = min(n - done, _BLOCK)
            out[done:done + step] = self.block[self.at:self.at + step]
            self.at = (self.at + 7919) % _BLOCK
            done += step
        return out


def _weight(rand: _Bytes, rows: int, cols: int, quant: str) -> tuple[np.ndarray, Any]:
    """A rows x cols weight as the bytes of `quant`, scaled so a row's dot product with a
    unit-variance input has a variance near one (RMS norms keep the activations finite)."""
    qtype = gguf.GGMLQuantizationType[quant]
    if quant == "F16":
        data = (rand.take(rows * cols * 2).view(np.int16).astype(np.float32) / 32768 * 1.7
                / np.sqrt(cols)).astype(np.float16)
        return data.reshape(rows, cols), None
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    data = rand.take(rows * cols // block * size).reshape(-1, size)
    if quant == "Q8_0":  # d (f16), 32 int8
        d = np.float16(1.0 / (74.0 * np.sqrt(cols)))
        data[:, :2] = np.frombuffer(d.tobytes(), dtype=np.uint8)
    elif quant == "Q4_K":  # d, dmin (f16), 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
        d = np.float16(1.0 / (32.0 * 4.6 * np.sqrt(cols)))
        scales = np.frombuffer(np.array([d, d], dtype=np.float16).tobytes(), dtype=np.uint8)
        data[:, :4] = scales
    else:
        raise ValueError(f"quant {quant}: choose Q4_K, Q8_0 or F16")
    return data.reshape(rows, cols // block * size), qtype


def write_model(path: Path, shape: Shape, seed: int = 0) -> Path:
    """Write `shape` as a qwen2 GGUF with random weights; return the path."""
    e, kv = shape.n_embd, shape.n_embd // shape.n_head * shape.n_head_kv

    def keys(writer: gguf.GGUFWriter) -> None:
        writer.add_name(shape.name)
        writer.add_context_length(32768)
        writer.add_embedding_length(e)
        writer.add_block_count(shape.n_layer)
        writer.add_feed_forward_length(shape.n_ff)
        writer.add_head_count(shape.n_head)
        writer.add_head_count_kv(shape.n_head_kv)
        writer.add_layer_norm_rms_eps(1e-6)
        writer.add_rope_freq_base(1e6)
        writer.add_file_type({"Q4_K": gguf.LlamaFileType.MOSTLY_Q4_K_M,
                              "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
                              "F16": gguf.LlamaFileType.MOSTLY_F16}[shape.quant])

    rand = _Bytes(seed)

    def weight(name: str, rows: int, cols: int) -> Tensor:
        return (name, *_weight(rand, rows, cols, shape.quant))

    def ones(name: str, n: int) -> Tensor:
        return name, np.ones(n, dtype=np.float32), None

    def tensors() -> Iterator[Tensor]:
        yield weight("token_embd.weight", shape.n_vocab, e)
        yield ones("output_norm.weight", e)
        yield weight("output.weight", shape.n_vocab, e)
        for i in range(shape.n_layer):
            b = f"blk.{i}"
            yield ones(f"{b}.attn_norm.weight", e)
            yield ones(f"{b}.ffn_norm.weight", e)
            for part, rows in (("q", e), ("k", kv), ("v", kv)):
                yield weight(f"{b}.attn_{part}.weight", rows, e)
                yield f"{b}.attn_{part}.bias", np.zeros(rows, dtype=np.float32), None
            yield weight(f"{b}.attn_output.weight", e, e)
            yield weight(f"{b}.ffn_gate.weight", shape.n_ff, e)
            yield weight(f"{b}.ffn_up.weight", shape.n_ff, e)
            yield weight(f"{b}.ffn_down.weight", e, shape.n_ff)

    write_gguf(path, "qwen2", keys, vocabulary(shape.n_vocab), tensors())
    return path


def hf_config(shape: Shape) -> dict[str, Any]:
    """The same shape as the keyword arguments of transformers' Qwen2Config."""
    return {"vocab_size": shape.n_vocab, "hidden_size": shape.n_embd,
            "intermediate_size": shape.n_ff, "num_hidden_layers": shape.n_layer,
            "num_attention_heads": shape.n_head, "num_key_value_heads": shape.n_head_kv,
            "max_position_embeddings": 32768, "rope_theta": 1e6, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": False}


def main() -> int:
    """Write the check's pair into a folder ahead of time (benchmarks/gpu/check.sh does it while
    llama.cpp builds)."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    for shape in (SMALL_TARGET, SMALL_DRAFT) if args.small else (QWEN_7B, QWEN_05B):
        part = args.folder / f"{shape.name}.gguf.partial"
        write_model(part, shape, seed=len(shape.name))
        part.rename(args.folder / f"{shape.name}.gguf")
        print(f"wrote {shape.name} ({shape.params / 1e9:.2f}B parameters)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
