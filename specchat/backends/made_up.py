"""GGUF files of made-up models, written in seconds with the `gguf` package: a byte-level BPE
vocabulary (GPT-2's printable stand-in for each byte, a few merges, the ChatML control tokens)
and whatever weights the caller makes. One writer for the test suite's tiny models
(tests/support/tinymodels.py) and the GPU check's random ones of a real model's shape
(benchmarks/gpu/models.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from specchat.backends.hf import bytes_to_unicode

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def byte_tokens() -> list[str]:
    """GPT-2's printable stand-in for each byte, in byte order."""
    mapping = bytes_to_unicode()
    return [mapping[b] for b in range(256)]


@dataclass(frozen=True)
class Vocabulary:
    tokens: list[str]
    types: list[int]
    merges: Sequence[str]
    model: str = "gpt2"
    """gpt2 (byte-level BPE, with `merges`) or llama (SentencePiece: scores instead)."""
    eos: str = "<|im_end|>"
    add_bos: bool = False

    @classmethod
    def byte_level(cls, merges: Sequence[str], fillers: Sequence[str] = (), **kw: Any) -> Vocabulary:
        """The byte tokens, one per merge, `fillers` (normal tokens), then the control tokens."""
        tokens = byte_tokens() + [m.replace(" ", "") for m in merges] + list(fillers)
        types = [int(gguf.TokenType.NORMAL)] * len(tokens) + [int(gguf.TokenType.CONTROL)] * len(SPECIALS)
        return cls(tokens + list(SPECIALS), types, merges, **kw)


Tensor = tuple[str, np.ndarray, Any]
"""A tensor's name, its data, and its raw GGML type (None: the array's own dtype)."""


def write_gguf(path: Path, arch: str, model_keys: Callable[[gguf.GGUFWriter], None],
               vocab: Vocabulary, tensors: Iterable[Tensor], chat_template: str | None = CHATML
               ) -> None:
    """A GGUF of architecture `arch`: `model_keys` adds the model's own keys (its name, shape
    and file type), then the vocabulary, the chat template and the tensors."""
    writer = gguf.GGUFWriter(str(path), arch)
    model_keys(writer)
    writer.add_tokenizer_model(vocab.model)
    writer.add_tokenizer_pre("default")
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.types)
    if vocab.model == "gpt2":
        writer.add_token_merges(list(vocab.merges))
    else:
        writer.add_token_scores([0.0] * len(vocab.tokens))
    writer.add_bos_token_id(vocab.tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(vocab.tokens.index(vocab.eos))
    writer.add_add_bos_token(vocab.add_bos)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    for name, data, raw_dtype in tensors:
        writer.add_tensor(name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
