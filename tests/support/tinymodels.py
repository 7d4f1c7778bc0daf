"""Tiny real GGUF models, written by the test suite in a second with the `gguf` package.

A 2-layer llama with a byte-level BPE vocabulary (256 byte tokens, a few merges, ChatML control
tokens). Weights are random but seeded; the output projection is scaled so the logits have a
spread like a real model's (clear winners, some near-ties). A draft is the target's weights plus
noise, so it agrees with the target often but not always.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np

from specchat.backends.made_up import SPECIALS, Vocabulary, byte_tokens, write_gguf

MERGES = ["Ġ t", "h e", "Ġt he", "Ġ a", "i n", "e r"]


@dataclass
class TinySpec:
    seed: int = 0
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_ff: int = 128
    n_ctx: int = 1024
    logit_scale: float = 4.0
    tokenizer_model: str = "gpt2"
    extra_tokens: int = 0
    """Padding tokens added at the end (to change the vocabulary size)."""
    swap_tokens: tuple[int, int] | None = None
    """Swap the texts of two token ids (same size, different vocabulary)."""
    add_bos: bool = False
    eos_name: str = "<|im_end|>"
    base: dict[str, np.ndarray] | None = field(default=None, repr=False)
    """Start from these weights (a draft's target) and add noise of `noise` std."""
    noise: float = 0.0


def vocabulary(spec: TinySpec) -> Vocabulary:
    tokens = byte_tokens() + [m.replace(" ", "") for m in MERGES]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    tokens += SPECIALS
    types += [gguf.TokenType.CONTROL] * len(SPECIALS)
    for i in range(spec.extra_tokens):
        tokens.append(f"[PAD{i}]")
        types.append(gguf.TokenType.UNUSED)
    if spec.swap_tokens:
        a, b = spec.swap_tokens
        tokens[a], tokens[b] = tokens[b], tokens[a]
    return Vocabulary(tokens, [int(t) for t in types], MERGES, spec.tokenizer_model,
                      spec.eos_name, spec.add_bos)


def weights(spec: TinySpec, n_vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(spec.seed)
    e, f = spec.n_embd, spec.n_ff

    def mat(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    w: dict[str, np.ndarray] = {
        "token_embd.weight": mat(n_vocab, e, 1.0),
        "output_norm.weight": np.ones(e, dtype=np.float32),
        "output.weight": mat(n_vocab, e, spec.logit_scale / np.sqrt(e)),
    }
    for i in range(spec.n_layer):
        w |= {
            f"blk.{i}.attn_norm.weight": np.ones(e, dtype=np.float32),
            f"blk.{i}.attn_q.weight": mat(e, e, 1 / np.sqrt(e)),
            f"blk.{i}.attn_k.weight": mat(e, e, 1 / np.sqrt(e)),
            f"blk.{i}.attn_v.weight": mat(e, e, 1 / np.sqrt(e)),
            f"blk.{i}.attn_output.weight": mat(e, e, 1 / np.sqrt(e)),
            f"blk.{i}.ffn_norm.weight": np.ones(e, dtype=np.float32),
            f"blk.{i}.ffn_gate.weight": mat(f, e, 1 / np.sqrt(e)),
            f"blk.{i}.ffn_up.weight": mat(f, e, 1 / np.sqrt(e)),
            f"blk.{i}.ffn_down.weight": mat(e, f, 1 / np.sqrt(f)),
        }
    if spec.base is not None:
        for name, arr in w.items():
            base = spec.base[name]
            w[name] = (base + spec.noise * np.std(base) * rng.standard_normal(base.shape)).astype(
                np.float32
            ) if base.shape == arr.shape else arr
    return w


def write_tiny_gguf(path: Path, spec: TinySpec) -> dict[str, np.ndarray]:
    """Write the model; return its weights so a draft can be derived from them."""
    vocab = vocabulary(spec)
    w = weights(spec, len(vocab.tokens))

    def keys(writer: gguf.GGUFWriter) -> None:
        writer.add_name(path.stem)
        writer.add_context_length(spec.n_ctx)
        writer.add_embedding_length(spec.n_embd)
        writer.add_block_count(spec.n_layer)
        writer.add_feed_forward_length(spec.n_ff)
        writer.add_head_count(spec.n_head)
        writer.add_head_count_kv(spec.n_head)
        writer.add_layer_norm_rms_eps(1e-5)
        writer.add_rope_dimension_count(spec.n_embd // spec.n_head)
        writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    write_gguf(path, "llama", keys, vocab, [(name, arr, None) for name, arr in w.items()])
    return w


def write_tiny_mamba(path: Path, seed: int = 0) -> None:
    """A 1-layer Mamba (a recurrent model: its memory cannot drop part of a sequence)."""
    spec = TinySpec(seed=seed)
    vocab = vocabulary(spec)
    rng = np.random.default_rng(seed)
    e, inner, state, rank, conv, v = 32, 64, 8, 4, 4, len(vocab.tokens)

    def mat(*shape: int, scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def keys(writer: gguf.GGUFWriter) -> None:
        writer.add_name(path.stem)
        writer.add_context_length(spec.n_ctx)
        writer.add_embedding_length(e)
        writer.add_block_count(1)
        writer.add_feed_forward_length(0)
        writer.add_head_count(0)
        writer.add_ssm_conv_kernel(conv)
        writer.add_ssm_inner_size(inner)
        writer.add_ssm_state_size(state)
        writer.add_ssm_time_step_rank(rank)
        writer.add_layer_norm_rms_eps(1e-5)
        writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    tensors = {
        "token_embd.weight": mat(v, e, scale=1.0),
        "output_norm.weight": np.ones(e, dtype=np.float32),
        "output.weight": mat(v, e, scale=4.0 / np.sqrt(e)),
        "blk.0.attn_norm.weight": np.ones(e, dtype=np.float32),
        "blk.0.ssm_in.weight": mat(2 * inner, e),
        "blk.0.ssm_conv1d.weight": mat(inner, conv),
        "blk.0.ssm_conv1d.bias": mat(inner),
        "blk.0.ssm_x.weight": mat(rank + 2 * state, inner),
        "blk.0.ssm_dt.weight": mat(inner, rank),
        "blk.0.ssm_dt.bias": mat(inner),
        "blk.0.ssm_a": -np.abs(mat(inner, state, scale=1.0)) - 0.1,
        "blk.0.ssm_d": np.ones(inner, dtype=np.float32),
        "blk.0.ssm_out.weight": mat(e, inner),
    }
    write_gguf(path, "mamba", keys, vocab,
               [(name, arr.astype(np.float32), None) for name, arr in tensors.items()],
               chat_template=None)
