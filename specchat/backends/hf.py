"""One model through PyTorch and Hugging Face transformers: the same Backend as llama.cpp's.

It loads a checkpoint folder (safetensors, config, tokenizer) or a GGUF file. transformers
dequantizes a GGUF at load (about 90 s for the 0.5B here), so the first load converts it once
into a checkpoint folder beside the models (`<models dir>/transformers/<name>/`) and later loads
start from that. The KV cache is a `DynamicCache` kept across rounds and turns and cropped to
the committed tokens, exactly like the llama.cpp backend's; `tokens` mirrors it.

torch and transformers are an optional extra (`pip install 'specchat[transformers]'`).
"""

from __future__ import annotations

import gc
import inspect
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specchat.engine.tree import depths, leaves, path_to
from specchat.errors import ContextOverflowError, DecodeError, ModelFileError, SpecchatError

DTYPES = ("auto", "float32", "bfloat16", "float16")


def _torch():
    try:
        import torch
        import transformers
    except ImportError:
        raise SpecchatError("the transformers backend needs torch and transformers: "
                            "pip install 'specchat[transformers]'") from None
    return torch, transformers


def pick_device(requested: str | None = None) -> str:
    """cuda, then mps, then cpu, unless one is asked for."""
    torch, _ = _torch()
    if requested and requested != "auto":
        return requested
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def converted_dir(gguf: Path, models_dir: Path) -> Path:
    return models_dir / "transformers" / gguf.stem


def checkpoint_for(path: Path, models_dir: Path) -> Path:
    """The checkpoint folder to load: `path` itself, or a GGUF's one-time conversion."""
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelFileError(f"{path}: not a transformers checkpoint (no config.json)")
        return path
    if not path.exists():
        raise ModelFileError(f"model file not found: {path}")
    if path.suffix != ".gguf":
        raise ModelFileError(f"{path}: give a checkpoint folder or a GGUF file")
    folder = converted_dir(path, models_dir)
    if (folder / "config.json").exists():
        return folder
    _, transformers = _torch()
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype="float32")
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except (ValueError, OSError, KeyError, RuntimeError) as exc:
        raise ModelFileError(f"{path.name}: transformers cannot load this GGUF: {exc}") from None
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # the tensors are dequantized float32 already; only the marker
        quantizer.remove_quantization_config(model)  # that forbids saving is left
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    del model
    gc.collect()
    os.replace(staging, folder)
    return folder


class TransformersBackend:
    """A causal LM on cpu, cuda or mps with a croppable KV cache."""

    def __init__(self, path: Path, models_dir: Path, n_ctx: int = 4096, device: str | None = None,
                 dtype: str = "auto", n_threads: int | None = None) -> None:
        torch, transformers = _torch()
        self.path = Path(path)
        self.name = self.path.stem if self.path.suffix == ".gguf" else self.path.name
        folder = checkpoint_for(self.path, models_dir)
        self.device = pick_device(device)
        if n_threads:
            torch.set_num_threads(n_threads)
        if dtype == "auto":
            dtype = {"cuda": "bfloat16", "mps": "float16"}.get(self.device, "float32")
        if dtype not in DTYPES:
            raise SpecchatError(f"dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
            self.model = transformers.AutoModelForCausalLM.from_pretrained(
                folder, dtype=getattr(torch, dtype)).to(self.device).eval()
        except (ValueError, OSError, KeyError) as exc:
            raise ModelFileError(f"{folder}: transformers cannot load it: {exc}") from None
        self._setup(torch, transformers, n_ctx, self.tokenizer)

    @classmethod
    def from_model(cls, model: Any, name: str, n_ctx: int = 4096) -> TransformersBackend:
        """A backend over a model already on its device, with no tokenizer: `eval`, `truncate`
        and the cache work, text does not (speed checks of random-weight models)."""
        torch, transformers = _torch()
        self = cls.__new__(cls)
        self.path, self.name, self.model = Path(name), name, model
        self.device = str(next(model.parameters()).device.type)
        self.tokenizer = None
        self._setup(torch, transformers, n_ctx, None)
        return self

    def _setup(self, torch: Any, transformers: Any, n_ctx: int, tokenizer: Any) -> None:
        config = self.model.config
        self.n_vocab = int(config.vocab_size)
        limit = getattr(config, "max_position_embeddings", None) or n_ctx
        self.n_ctx = min(n_ctx, int(limit))
        self._cache = transformers.DynamicCache(config=config)
        self.can_truncate = bool(self._cache.is_croppable)
        self.can_tree = self.can_truncate
        self._tree: tuple[int, list[int], list[int]] | None = None
        """The tree `eval_tree` left in the cache (where its nodes start, the nodes, the path
        to the first leaf), until `keep_path` (or a truncation)."""
        # transformers 5.24 names the forward's cache argument `cache`, earlier 5.x releases
        # `past_key_values`; one that is not named is silently ignored, so ask the model
        forward = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in forward else "past_key_values"
        self.tokens: list[int] = []
        self.passes = 0
        self._torch = torch
        self._pieces = _token_pieces(tokenizer) if tokenizer is not None else []
        self._eog = _eog_ids(tokenizer, self.model) if tokenizer is not None else set()

    # -- text ---------------------------------------------------------------------------------
    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False,
                                   split_special_tokens=not special)["input_ids"])

    def token_bytes(self, token: int) -> bytes:
        return self._pieces[token] if token < len(self._pieces) else b""

    def is_eog(self, token: int) -> bool:
        return token in self._eog

    def render_chat(self, messages: Sequence[tuple[str, str]]) -> str:
        return self.tokenizer.apply_chat_template(
            [{"role": r, "content": c} for r, c in messages], tokenize=False,
            add_generation_prompt=True)

    # -- the model ----------------------------------------------------------------------------
    def eval(self, tokens: Sequence[int], logits_from: int) -> np.ndarray:
        start = len(self.tokens)
        if start + len(tokens) > self.n_ctx:
            raise ContextOverflowError(f"{self.name}: {start + len(tokens)} tokens do not fit "
                                       f"the context of {self.n_ctx}")
        torch = self._torch
        ids = torch.tensor([list(tokens)], dtype=torch.long, device=self.device)
        try:
            with torch.inference_mode():
                out = self.model(input_ids=ids, use_cache=True, **{self._cache_arg: self._cache},
                                 logits_to_keep=len(tokens) - logits_from)
        except (RuntimeError, ValueError) as exc:  # out of memory, a device error
            grown = self._cache.get_seq_length() - start
            if grown > 0:
                self._cache.crop(-grown)  # leave the cache as it was before this call
            raise DecodeError(f"{self.name}: the forward pass failed ({exc})") from None
        finally:
            self.passes += 1
        self.tokens.extend(tokens)
        return out.logits[0].float().cpu().numpy()

    def eval_tree(self, tokens: Sequence[int], nodes: Sequence[int],
                  parents: Sequence[int]) -> np.ndarray:
        """One forward pass with a 4D attention mask over the tree (each node sees the cache,
        `tokens` and its ancestors) and each node at its depth's position; the cache holds the
        nodes in batch order until `keep_path` keeps one path of them."""
        start, n_tok = len(self.tokens), len(tokens)
        n = n_tok + len(nodes)
        if start + n > self.n_ctx:
            raise ContextOverflowError(f"{self.name}: {start + n} tokens do not fit the "
                                       f"context of {self.n_ctx}")
        torch = self._torch
        allow = np.zeros((n, start + n), dtype=bool)
        allow[:, :start + n_tok] = True
        allow[:n_tok, start:start + n_tok] = np.tril(np.ones((n_tok, n_tok), dtype=bool))
        for i, parent in enumerate(parents):
            if parent >= 0:
                allow[n_tok + i, start + n_tok:] = allow[n_tok + parent, start + n_tok:]
            allow[n_tok + i, start + n_tok + i] = True
        dtype = next(self.model.parameters()).dtype
        mask = torch.full((1, 1, n, start + n), torch.finfo(dtype).min, dtype=dtype)
        mask[0, 0][torch.from_numpy(allow)] = 0.0
        positions = [start + j for j in range(n_tok)] + [start + n_tok + d
                                                         for d in depths(parents)]
        ids = torch.tensor([[*tokens, *nodes]], dtype=torch.long, device=self.device)
        try:
            with torch.inference_mode():
                out = self.model(input_ids=ids, attention_mask=mask.to(self.device),
                                 position_ids=torch.tensor([positions], device=self.device),
                                 use_cache=True, **{self._cache_arg: self._cache},
                                 logits_to_keep=len(nodes) + 1)
        except (RuntimeError, ValueError) as exc:
            grown = self._cache.get_seq_length() - start
            if grown > 0:
                self._cache.crop(-grown)
            raise DecodeError(f"{self.name}: the forward pass failed ({exc})") from None
        finally:
            self.passes += 1
        self.tokens.extend(tokens)
        first_path = path_to(parents, leaves(parents)[0])
        self._tree = (start + n_tok, list(nodes), first_path)
        self.tokens.extend(nodes[i] for i in first_path)
        return out.logits[0].float().cpu().numpy()

    def keep_path(self, path: Sequence[int]) -> None:
        tree, self._tree = self._tree, None
        if tree is None:
            raise DecodeError(f"{self.name}: no draft tree to keep a path of")
        base, nodes, _ = tree
        keep = self._torch.tensor([*range(base), *(base + i for i in path)], device=self.device)
        for layer in self._cache.layers:
            if layer.is_initialized:
                layer.keys = layer.keys.index_select(-2, keep)
                layer.values = layer.values.index_select(-2, keep)
        del self.tokens[base:]
        self.tokens.extend(nodes[i] for i in path)

    def fit_threads(self, free: int) -> int:
        """torch's thread count is the process's, set once at load: left as it is."""
        return _torch()[0].get_num_threads()

    def truncate(self, n: int) -> None:
        if self._tree is not None:  # a tree no path was kept of: the first leaf's path stays
            self.keep_path(self._tree[2])
        if n < len(self.tokens):
            self._cache.crop(n - len(self.tokens))  # negative: drop that many from the end
            del self.tokens[n:]

    local = True

    @property
    def where(self) -> str:
        return "here" if self.device == "cpu" else f"here ({self.device})"

    def close(self) -> None:
        self.model = None
        self._cache = None
        gc.collect()


EOG_TEXTS = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|end|>",
             "<end_of_turn>", "</s>", "<|eom_id|>")
"""Added tokens that end generation (as llama.cpp's vocabulary marks them end-of-generation)."""


def _eog_ids(tokenizer, model) -> set[int]:
    """End-of-generation tokens: the tokenizer's EOS, the generation config's, and the added
    tokens llama.cpp also treats as ends, so both backends stop at the same tokens."""
    ids = {tokenizer.eos_token_id}
    ids |= {i for i, t in tokenizer.added_tokens_decoder.items() if str(t) in EOG_TEXTS}
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids |= set(configured) if isinstance(configured, list) else {configured}
    return {i for i in ids if i is not None}


def _token_pieces(tokenizer) -> list[bytes]:
    """Each token id's exact bytes (a piece may be part of a UTF-8 character): byte-level BPE
    maps bytes to printable characters; SentencePiece writes spaces as '▁' and raw bytes as
    <0xNN>; added tokens are their text, control tokens nothing (as llama.cpp renders them)."""
    decoder = json.loads(tokenizer.backend_tokenizer.to_str()).get("decoder") or {}
    kinds = {decoder.get("type")} | {d.get("type") for d in decoder.get("decoders", [])}
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    for i, token in tokenizer.added_tokens_decoder.items():
        if token.special and i < len(vocab):
            vocab[i] = ""
    added = {i for i in tokenizer.added_tokens_decoder}
    if "ByteLevel" in kinds:
        byte_of = {ch: b for b, ch in bytes_to_unicode().items()}
        return [piece.encode() if i in added or piece is None
                else bytes(byte_of.get(ch, 32) for ch in piece) for i, piece in enumerate(vocab)]
    out = []
    for i, piece in enumerate(vocab):
        if piece is None:
            out.append(b"")
        elif i not in added and len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            out.append(bytes([int(piece[3:5], 16)]))
        else:
            out.append((piece if i in added else piece.replace("\u2581", " ")).encode())
    return out


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (byte-level BPE)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping
