"""One GGUF model through llama-cpp-python's low-level batch API.

Logits are asked for only at the batch positions the engine needs (never `logits_all`): with a
151936-token vocabulary each row is 600 KB. The KV cache is mirrored in `tokens` so truncation
and reuse across rounds and turns are plain list operations.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np

from specchat.backends import rpc as rpc_servers
from specchat.catalog.gguf_file import read_gguf
from specchat.cpu import default_threads
from specchat.engine.tree import depths, leaves, path_to
from specchat.errors import CacheTruncationError, ContextOverflowError, DecodeError, ModelFileError
from specchat.native import model_thread

_SEQ = 0
TREE_PATHS = 16
"""Root-to-leaf paths of a draft tree verified in one pass at most: llama.cpp's sequences
(n_seq_max, in one unified cache, so each still has the whole context)."""
_init_lock = threading.Lock()
_initialised = False
_log_tail: deque[str] = deque(maxlen=20)


@llama_cpp.llama_log_callback
def _log_to_tail(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    """Keep llama.cpp's log out of the terminal, but remember its last lines for error messages."""
    if text:
        _log_tail.append(text.decode("utf-8", "replace").rstrip())


def quiet_log() -> None:
    """llama.cpp's log into the tail, unless SPECCHAT_LLAMA_LOG asks for it in the terminal
    (llama-cpp-python's own logger then)."""
    from llama_cpp import _logger

    quiet = not os.environ.get("SPECCHAT_LLAMA_LOG")
    llama_cpp.llama_log_set(_log_to_tail if quiet else _logger.llama_log_callback,
                            ctypes.c_void_p(0))


def ensure_backend() -> None:
    global _initialised
    with _init_lock:
        if not _initialised:
            quiet_log()
            llama_cpp.llama_backend_init()
            _initialised = True


def _last_error_line() -> str:
    for line in reversed(_log_tail):
        if "error" in line.lower() or "failed" in line.lower():
            return line.strip()
    return ""


def load_model(path: Path, mparams: llama_cpp.llama_model_params) -> llama_cpp.llama_model_p:
    """llama.cpp's model for `path`, or ModelFileError with llama.cpp's own last error line."""
    model = model_thread.call(lambda: llama_cpp.llama_model_load_from_file(str(path).encode(),
                                                                          mparams))
    if not model:
        detail = _last_error_line()
        raise ModelFileError(f"llama.cpp could not load {path}" + (f": {detail}" if detail else ""))
    return model


class LlamaVocab:
    """The text side of a loaded model (tokens, pieces, end-of-generation, chat template): the
    same for a model evaluated here and for one evaluated in a child process, for which only
    the vocabulary is loaded here (specchat/backends/isolated.py)."""

    name: str

    def _use_vocab(self, model: llama_cpp.llama_model_p) -> None:
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self._piece_cache: dict[int, bytes] = {}
        self._piece_buf = ctypes.create_string_buffer(256)
        self._add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self._bos = int(llama_cpp.llama_vocab_bos(self._vocab))
        template = llama_cpp.llama_model_chat_template(model, None)
        self._chat_template: bytes = template if template else b"chatml"

    # -- vocabulary -------------------------------------------------------------------------
    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 8
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, n_max, True, special)
        if n < 0:
            n_max = -n
            buf = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, n_max, True, special)
        ids = list(buf[:n])
        if self._add_bos and len(ids) > 1 and ids[0] == ids[1] == self._bos:
            ids = ids[1:]  # the template already wrote BOS; llama.cpp added another
        return ids

    def token_bytes(self, token: int) -> bytes:
        piece = self._piece_cache.get(token)
        if piece is None:
            n = llama_cpp.llama_token_to_piece(
                self._vocab, token, self._piece_buf, len(self._piece_buf), 0, False
            )
            piece = self._piece_buf.raw[: max(n, 0)]
            self._piece_cache[token] = piece
        return piece

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def render_chat(self, messages: Sequence[tuple[str, str]]) -> str:
        keep = [(r.encode(), c.encode()) for r, c in messages]
        chat = (llama_cpp.llama_chat_message * len(keep))(
            *[llama_cpp.llama_chat_message(r, c) for r, c in keep]
        )
        size = sum(len(r) + len(c) for r, c in keep) * 2 + 256
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_chat_apply_template(
                self._chat_template, chat, len(keep), True, buf, size
            )
            if n < 0:
                raise ModelFileError(f"{self.name}: llama.cpp has no chat template for this model")
            if n <= size:
                return buf.raw[:n].decode("utf-8", "replace")
            size = n + 1
        raise ModelFileError(f"{self.name}: chat template output did not fit")  # pragma: no cover


class LlamaCppBackend(LlamaVocab):
    """A GGUF model with its own context (KV cache) and a reusable batch."""

    def __init__(
        self,
        path: str | Path,
        *,
        n_ctx: int = 4096,
        n_gpu_layers: int | None = None,
        n_threads: int | None = None,
        n_batch: int = 512,
        rpc: str | None = None,
        progress: Callable[[float], None] | None = None,
    ) -> None:
        """`rpc`: HOST:PORT[,...] of ggml RPC servers that hold the offloaded layers (all of
        them unless `n_gpu_layers` says fewer). ggml aborts the process when such a server
        dies, so specchat loads these models in a child process (IsolatedBackend).
        `progress` is called with the fraction of the weights loaded as loading goes on."""
        path = Path(path)
        read_gguf(path)  # a clear error for missing, non-GGUF and truncated files
        ensure_backend()
        self.name = path.stem
        self.path = path
        mparams = llama_cpp.llama_model_default_params()
        if n_gpu_layers is None:
            n_gpu_layers = 999 if llama_cpp.llama_supports_gpu_offload() else 0
        mparams.n_gpu_layers = n_gpu_layers
        self.n_gpu_layers = n_gpu_layers
        self.rpc = rpc_servers.parse(rpc) if rpc else []
        """The RPC servers this model's offloaded layers are on ([]: this machine)."""
        if self.rpc:
            self._devices = rpc_servers.devices(self.rpc)
            mparams.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        if progress is not None:
            report = llama_cpp.llama_progress_callback(lambda done, _: progress(done) or True)
            mparams.progress_callback = report
        self._model = load_model(path, mparams)
        self._use_vocab(self._model)
        threads = n_threads or default_threads()
        cparams = llama_cpp.llama_context_default_params()
        train_ctx = int(llama_cpp.llama_model_n_ctx_train(self._model))
        cparams.n_ctx = min(n_ctx, train_ctx) if train_ctx > 0 else n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = TREE_PATHS
        cparams.kv_unified = True
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.no_perf = True
        self._ctx = model_thread.call(lambda: llama_cpp.llama_init_from_model(self._model, cparams))
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            detail = _last_error_line()
            raise ModelFileError(
                f"llama.cpp could not create a context for {path}"
                + (f": {detail}" if detail else "")
            )
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx))
        self.n_batch = int(llama_cpp.llama_n_batch(self._ctx))  # llama.cpp may clamp it
        self.n_threads = threads
        self._max_threads = threads
        self._auto_threads = n_threads is None
        """The user left the thread count to specchat: it follows the free cores."""
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, TREE_PATHS)
        self.tokens: list[int] = []
        self.passes = 0
        self.can_truncate = not (llama_cpp.llama_model_is_recurrent(self._model)
                                 or llama_cpp.llama_model_is_hybrid(self._model))
        """False for recurrent and hybrid models: their memory cannot drop part of a sequence."""
        self.can_tree = self.can_truncate
        self._tree: _Tree | None = None
        """The tree `eval_tree` left in the cache, until `keep_path` (or a truncation)."""

    # -- evaluation -------------------------------------------------------------------------
    def eval(self, tokens: Sequence[int], logits_from: int) -> np.ndarray:
        """The passes on the process's llama thread (specchat/native/model_thread.py says why)."""
        return model_thread.call(lambda: self._eval(tokens, logits_from))

    def _eval(self, tokens: Sequence[int], logits_from: int) -> np.ndarray:
        n = len(tokens)
        start = len(self.tokens)
        if start + n > self.n_ctx:
            raise ContextOverflowError(
                f"{self.name}: {start + n} tokens do not fit the context of {self.n_ctx}"
            )
        rows: list[np.ndarray] = []
        batch = self._batch
        for lo in range(0, n, self.n_batch):
            hi = min(n, lo + self.n_batch)
            n_out = 0
            for j, i in enumerate(range(lo, hi)):
                batch.token[j] = tokens[i]
                batch.pos[j] = start + i
                batch.n_seq_id[j] = 1
                batch.seq_id[j][0] = _SEQ
                want = i >= logits_from
                batch.logits[j] = want
                n_out += want
            batch.n_tokens = hi - lo
            rc = llama_cpp.llama_decode(self._ctx, batch)
            self.passes += 1
            if rc != 0:
                self.truncate(start)  # leave the cache as it was before this call
                raise DecodeError(f"{self.name}: llama_decode failed with code {rc}"
                                  + (f" ({_last_error_line()})" if _last_error_line() else ""))
            self.tokens.extend(tokens[lo:hi])
            if n_out:
                ptr = llama_cpp.llama_get_logits(self._ctx)
                rows.append(np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab)).copy())
        if not rows:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        return rows[0] if len(rows) == 1 else np.concatenate(rows)

    def eval_tree(self, tokens: Sequence[int], nodes: Sequence[int],
                  parents: Sequence[int]) -> np.ndarray:
        return model_thread.call(lambda: self._eval_tree(tokens, nodes, parents))

    def _eval_tree(self, tokens: Sequence[int], nodes: Sequence[int],
                   parents: Sequence[int]) -> np.ndarray:
        """Each root-to-leaf path is a sequence of llama.cpp's (the first leaf's sequence 0, the
        one the cache keeps otherwise): a node is in the sequences of the leaves below it, the
        committed tokens in all, so attention sees exactly a node's ancestors."""
        if len(tokens) + len(nodes) > self.n_batch:  # the backlog first: the tree in one batch
            self._eval(tokens[:-1], len(tokens))
            tokens = tokens[-1:]
        start = len(self.tokens)
        tree = _Tree.of(start + len(tokens), parents)
        if len(tree.leaves) > TREE_PATHS:
            raise DecodeError(f"{self.name}: a draft tree of {len(tree.leaves)} leaves "
                              f"(at most {TREE_PATHS})")
        if tree.base + max(tree.depth, default=-1) + 1 > self.n_ctx:
            raise ContextOverflowError(f"{self.name}: the draft tree does not fit the context "
                                       f"of {self.n_ctx}")
        for seq in range(1, len(tree.leaves)):
            llama_cpp.llama_memory_seq_cp(self._mem, _SEQ, seq, -1, -1)
        batch, every = self._batch, list(range(len(tree.leaves)))
        for j, tok in enumerate([*tokens, *nodes]):
            node = j - len(tokens)
            seqs = every if node < 0 else tree.seqs[node]
            batch.token[j] = tok
            batch.pos[j] = start + j if node < 0 else tree.base + tree.depth[node]
            batch.n_seq_id[j] = len(seqs)
            for m, seq in enumerate(seqs):
                batch.seq_id[j][m] = seq
            batch.logits[j] = node >= -1
        batch.n_tokens = len(tokens) + len(nodes)
        rc = llama_cpp.llama_decode(self._ctx, batch)
        self.passes += 1
        if rc != 0:
            llama_cpp.llama_memory_seq_keep(self._mem, _SEQ)
            llama_cpp.llama_memory_seq_rm(self._mem, _SEQ, start, -1)
            raise DecodeError(f"{self.name}: llama_decode failed with code {rc}"
                              + (f" ({_last_error_line()})" if _last_error_line() else ""))
        self.tokens.extend(tokens)
        self.tokens.extend(nodes[i] for i in path_to(parents, tree.leaves[0]))
        self._tree = tree
        ptr = llama_cpp.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(len(nodes) + 1, self.n_vocab)).copy()

    def keep_path(self, path: Sequence[int]) -> None:
        model_thread.call(lambda: self._keep_path(path))

    def _keep_path(self, path: Sequence[int]) -> None:
        """Keeps the path only as far as sequence 0 (the first leaf's line) holds it: a branch
        that stood is cut with the rest of the tree, and the engine's next pass evaluates its
        tokens again (a row each). Kept in place, its cell would follow the refused tokens'
        free cells, which the next tokens take: the cache out of the text's order, which
        flash attention's half-precision sums round differently (a top-2 gap moved by 0.008
        on the tiny target)."""
        tree, self._tree = self._tree, None
        if tree is None:
            raise CacheTruncationError(self.name)
        on_line = 0
        while on_line < len(path) and tree.seqs[path[on_line]][0] == _SEQ:
            on_line += 1
        llama_cpp.llama_memory_seq_keep(self._mem, _SEQ)
        self.truncate(tree.base + on_line)

    def fit_threads(self, free: int) -> int:
        if self._auto_threads:
            n = max(1, min(self._max_threads, free))
            if n != self.n_threads:
                llama_cpp.llama_set_n_threads(self._ctx, n, n)
                self.n_threads = n
        return self.n_threads

    def truncate(self, n: int) -> None:
        if self._tree is not None:  # a tree no path was kept of: sequence 0's line stays
            self._tree = None
            llama_cpp.llama_memory_seq_keep(self._mem, _SEQ)
        if n >= len(self.tokens):
            return
        if not llama_cpp.llama_memory_seq_rm(self._mem, _SEQ, n, -1):
            raise CacheTruncationError(self.name)
        del self.tokens[n:]

    @property
    def local(self) -> bool:
        return not self.rpc

    @property
    def where(self) -> str:
        if not self.rpc:
            return "here"
        layers = "" if self.n_gpu_layers >= 999 else f", {self.n_gpu_layers} layers"
        return f"RPC {','.join(self.rpc)}{layers}"

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            llama_cpp.llama_model_free(self._model)
            self._ctx = None

    def __del__(self) -> None:  # models hold GBs; free them with the object
        try:
            self.close()
        except Exception:
            pass


@dataclass(frozen=True)
class _Tree:
    """A draft tree as llama.cpp's sequences hold it: sequence s is the path to `leaves[s]`."""

    base: int
    """The cache position of the root's children."""
    depth: list[int]
    leaves: list[int]
    seqs: list[list[int]]
    """The sequences each node is in (those of the leaves below it), ascending."""

    @classmethod
    def of(cls, base: int, parents: Sequence[int]) -> _Tree:
        ends = leaves(parents)
        seqs: list[list[int]] = [[] for _ in parents]
        for seq, leaf in enumerate(ends):
            for node in path_to(parents, leaf):
                seqs[node].append(seq)
        return cls(base, depths(parents), ends, seqs)


def system_info() -> tuple[str, bool]:
    """llama.cpp's build features line and whether this machine has a GPU it runs models on
    (not `llama_supports_gpu_offload`, which an RPC build answers yes on any machine)."""
    from specchat.backends.rpc import local_gpus

    ensure_backend()
    return (llama_cpp.llama_print_system_info().decode("utf-8", "replace"), bool(local_gpus()))
