"""A draft model that scores only the most frequent token ids (FR-Spec, arXiv:2502.14856).

A draft pass of the 0.5B Qwen draft spends a fifth of its time in the output layer (151,936 rows
of 896: docs/lab/), scoring tokens it almost never proposes. The file written here is
the draft with the first `HOT_TOKENS` rows of its output matrix added as a tensor of their own,
`output_hot.weight`; specchat's patched llama.cpp (patches/llama.cpp/0003) scores a model that
has it over those rows alone and gives every other token id a logit of -inf. A byte-level BPE
vocabulary numbers its tokens in the order its merges were learned, most frequent first, so the
first ids are the frequent ones: of the tokens of a sample of specchat's own code and docs, the
first 32,768 of Qwen2.5's ids cover 96.9%, the first 65,536 99.4%. Lossless: the target
verifies each proposal over its whole vocabulary, and a sampling draft's q is the distribution
it actually proposed from.

Only a llama.cpp with that patch loads such a file (another refuses it for its one tensor more
than it expects); the original stays beside it under its catalog name.

The rows are copied as they lie (a quantized row is whole blocks of its own), so the hot logits
are the full layer's: the same bits for the Q4_0 0.5B, whose two matrices take the same kernel.
"""

from __future__ import annotations

from pathlib import Path

from specchat.catalog.gguf_file import HOT_TENSOR, NEEDS_HOT, NEEDS_KEY, copy_gguf

HOT_TOKENS = 65536
"""Token ids a draft scores: a multiple of 16 (the x86 Q4_0 kernels take 8 or 16 rows a pass).
Of the Q4_0 0.5B's 151,936, the first 65,536 cut a pass by 13% and its k=3 acceptance over the
suite from 80% to 77%; 32,768 cut it by 17% and acceptance to 74%, 16,384 to 67%
(docs/lab/)."""
HOT_ARCHITECTURES = ("llama", "qwen2")
"""The graphs patches/llama.cpp/0003 gives the hot output to."""


def can_score_hot(path: Path) -> bool:
    """Whether the model's architecture has the hot output in specchat's llama.cpp and its
    vocabulary is larger than the hot set."""
    import gguf

    reader = gguf.GGUFReader(path)
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    tokens = reader.fields.get(gguf.Keys.Tokenizer.LIST)
    return arch in HOT_ARCHITECTURES and tokens is not None and len(tokens.data) > HOT_TOKENS


def write_hot_draft(source: Path, out: Path, n_hot: int = HOT_TOKENS) -> None:
    """Write `source` to `out` with its output matrix's first `n_hot` rows as `output_hot`
    (the tied token embedding's, for a model without an output matrix)."""
    import gguf

    reader = gguf.GGUFReader(source)
    tensors = {t.name: t for t in reader.tensors}
    output = tensors.get("output.weight") or tensors["token_embd.weight"]
    copy_gguf(reader, out, [(t.name, t.data, t.tensor_type) for t in reader.tensors]
              + [(HOT_TENSOR, output.data[:n_hot], output.tensor_type)],
              {NEEDS_KEY: NEEDS_HOT})
