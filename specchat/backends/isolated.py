"""A llama.cpp model evaluated in a child process, so that losing it costs a turn, not the app.

Models whose layers are on RPC servers run this way: ggml's RPC client aborts the whole process
when a server dies in the middle of a call, and waits forever on one that stopped without
closing the connection. The child holds the model and its KV cache and answers `eval` over a
socket pair, the logits rows through a shared memory file (a Qwen row is 600 KB, and both
processes must take turns to move rows through a socket: docs/rpc.md measures both ways).
This side loads only the vocabulary (no weights), so tokenizing, pieces and the chat template
need no round trip, and mirrors the cache in `tokens` as every backend
does (a truncation travels with the next eval: no round trip either).

When the child is lost (the server died: ggml's message comes back first; no answer within the
timeout: the child is killed), the call raises RemoteError naming the servers and the mirrored
cache is empty, as the new child's will be: the next eval starts one, which loads the model on
the servers again. So a turn can be sent again once the server is back, in the same app.
"""

from __future__ import annotations

import math
import mmap
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any, NoReturn

import llama_cpp
import numpy as np

from specchat import errors
from specchat.backends import rpc as rpc_servers
from specchat.backends.llamacpp import LlamaCppBackend, LlamaVocab, ensure_backend, load_model
from specchat.backends.rpc import RemoteError
from specchat.catalog.gguf_file import read_gguf
from specchat.cpu import default_threads

_ERRORS: dict[str, type[errors.SpecchatError]] = {
    cls.__name__: cls for cls in (errors.ModelFileError, errors.ContextOverflowError,
                                  errors.DecodeError, RemoteError)}
"""The errors a child sends back by name (any other becomes a SpecchatError)."""


class IsolatedBackend(LlamaVocab):
    """A GGUF model on RPC servers, driven from a child process (see the module's docstring)."""

    def __init__(
        self,
        path: str | Path,
        *,
        rpc: str,
        timeout_s: float = 120.0,
        n_ctx: int = 4096,
        n_gpu_layers: int | None = None,
        n_threads: int | None = None,
        n_batch: int = 512,
    ) -> None:
        """`timeout_s`: how long one pass of the model may go unanswered before the server is
        given up as stopped answering."""
        path = Path(path)
        read_gguf(path)
        ensure_backend()
        self.name, self.path = path.stem, path
        self.rpc = rpc_servers.parse(rpc)
        self.timeout_s = timeout_s
        self._load: dict[str, Any] = dict(path=path, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers,
                                          n_threads=n_threads, n_batch=n_batch, rpc=rpc)
        self.n_threads = n_threads or default_threads()
        mparams = llama_cpp.llama_model_default_params()
        mparams.vocab_only = True
        self._model: llama_cpp.llama_model_p | None = load_model(path, mparams)
        self._use_vocab(self._model)
        self.tokens: list[int] = []
        self.passes = 0
        self.child_s = 0.0
        """Seconds the child spent evaluating: an eval's wall time less this is what the
        process boundary cost (docs/rpc.md)."""
        self._child: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._log: IO[bytes] | None = None
        self._rows = SharedRows()
        try:
            info = self._start()
        except BaseException:
            self.close()
            raise
        self.n_ctx, self.n_batch = int(info["n_ctx"]), int(info["n_batch"])
        self.can_truncate: bool = info["can_truncate"]
        self._where: str = info["where"]

    local = False  # its passes run in the child process (and their layers on the servers)
    can_tree = False  # the child evaluates chains: the engine drafts chains for it

    def eval_tree(self, tokens: Sequence[int], nodes: Sequence[int],
                  parents: Sequence[int]) -> np.ndarray:
        raise errors.DecodeError(f"{self.name}: a model on RPC servers verifies chains, not trees")

    def keep_path(self, path: Sequence[int]) -> None:
        raise errors.DecodeError(f"{self.name}: a model on RPC servers verifies chains, not trees")

    @property
    def where(self) -> str:
        return self._where

    # -- the child --------------------------------------------------------------------------
    def _start(self) -> dict[str, Any]:
        """Start a child and load the model there; its description, or the load's error."""
        here, there = multiprocessing.Pipe()
        self._log = tempfile.TemporaryFile()  # the child's stray output, for its last words
        fds = (there.fileno(), self._rows.fd)
        self._child = subprocess.Popen(
            [sys.executable, "-m", "specchat.backends.isolated", *map(str, fds)],
            pass_fds=fds, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
            start_new_session=True)  # Ctrl-C in the terminal is not its
        there.close()
        self._conn = here
        here.send(self._load)
        try:  # each step of the load (weights sent to the servers) within the timeout
            info: dict[str, Any] = self._answer(
                self.timeout_s, f"no progress loading {self.name} (is it serving another "
                "client? a server serves one at a time)")
        except errors.SpecchatError:
            self._stop()
            raise
        return info

    def _answer(self, timeout: float, waiting: str) -> Any:
        """The child's answer; a `progress` report of a load restarts the timeout, after which
        the child is given up, saying what it was `waiting` for."""
        conn = self._conn
        assert conn is not None
        kind = "progress"
        while kind == "progress":
            if not conn.poll(timeout):
                self._lost(f"{waiting} in {timeout:g} s (--rpc-timeout)")
            try:
                kind, value, *message = conn.recv()
            except (EOFError, OSError):
                self._lost(self._last_words())
        if kind == "lost":
            self._lost(value)
        if kind == "error":
            raise _ERRORS.get(value, errors.SpecchatError)(*message)
        return value

    def _last_words(self) -> str:
        """Why a child ended without saying so: its last line of output, or its exit status."""
        assert self._child is not None and self._log is not None
        status = self._child.wait()
        self._log.seek(0)
        lines = [line.strip() for line in self._log.read().decode("utf-8", "replace").splitlines()]
        said = [line for line in lines if line]
        return said[-1] if said else f"the process that held {self.name} ended (status {status})"

    def _lost(self, reason: str) -> NoReturn:
        self._stop(wait_s=0)
        self.tokens = []
        raise RemoteError(
            f"the RPC server ({', '.join(self.rpc)}) stopped answering: {reason}. Once it runs "
            f"again, send a message: {self.name} loads there again")

    def _stop(self, wait_s: float = 5) -> None:
        """End the child: asked to, killed if it has not within `wait_s`."""
        conn, child, self._conn, self._child = self._conn, self._child, None, None
        if conn is not None:
            try:
                conn.send(("close",))
            except OSError:
                pass
            conn.close()
        if child is not None:
            try:
                child.wait(wait_s)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- evaluation -------------------------------------------------------------------------
    def eval(self, tokens: Sequence[int], logits_from: int) -> np.ndarray:
        if self._conn is None:  # lost before: load the model on the servers again
            self._start()
        assert self._conn is not None
        size = self._rows.fit(max(0, len(tokens) - max(0, logits_from)) * self.n_vocab * 4)
        self._conn.send(("eval", len(self.tokens), list(tokens), logits_from, size))
        passes = max(1, math.ceil(len(tokens) / self.n_batch))
        n_passes, n_rows, seconds = self._answer(self.timeout_s * passes,
                                                 f"no answer to a pass of {self.name}")
        self.passes += n_passes
        self.child_s += seconds
        self.tokens.extend(tokens)
        return self._rows.view(n_rows, self.n_vocab).copy()

    def let_go(self) -> None:
        """End the child, so the servers can serve another client (a ggml RPC server serves
        one at a time); the cache is gone, and the next eval loads the model there again."""
        self._stop()
        self.tokens = []

    def fit_threads(self, free: int) -> int:
        """Its passes run on RPC servers: this machine's free cores do not bound them."""
        return self.n_threads

    def truncate(self, n: int) -> None:
        """Cut the mirror; the child cuts its cache to it before the next eval."""
        del self.tokens[n:]

    def close(self) -> None:
        if getattr(self, "_rows", None) is None:  # __init__ failed before the child
            return
        self._stop()
        self._rows.close()
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class SharedRows:
    """The logits rows the child hands back: a memory file both processes map (made by the
    parent, which grows it before an eval that needs more; the child maps it again then)."""

    def __init__(self, fd: int | None = None) -> None:
        if fd is None:
            fd = os.memfd_create("specchat-rows") if hasattr(os, "memfd_create") else \
                os.dup(tempfile.TemporaryFile().fileno())
        self.fd = fd
        self.size = os.fstat(fd).st_size
        """The file's size as the parent, the one that grows it, last made it."""
        self._map: mmap.mmap | None = None

    def fit(self, size: int) -> int:
        """Grow the file to hold `size` bytes (here); its size, which the child maps."""
        if size > self.size:
            self.size = max(size, 2 * self.size)
            os.ftruncate(self.fd, self.size)
        return self.size

    def view(self, n_rows: int, n_vocab: int, size: int | None = None) -> np.ndarray:
        """The first `n_rows` rows, mapping the file again when it grew (to `size`, which the
        child is told; the parent knows its own)."""
        size = size or self.size
        if size and (self._map is None or len(self._map) < size):
            if self._map is not None:
                self._map.close()
            self._map = mmap.mmap(self.fd, size)
        if not n_rows:
            return np.empty((0, n_vocab), dtype=np.float32)
        assert self._map is not None
        return np.frombuffer(self._map, np.float32, n_rows * n_vocab).reshape(n_rows, n_vocab)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _serve(conn: Connection, rows_out: SharedRows) -> None:
    """The child: load the model the parent names, then evaluate until told to close."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def last_words(text: str) -> None:  # ggml is about to abort: say why, then end
        conn.send(("lost", text))
        os._exit(3)

    shown = [0.0]

    def progress(done: float) -> None:  # each percent of the weights loaded
        if done >= shown[0] + 0.01:
            shown[0] = done
            conn.send(("progress", done))

    rpc_servers.on_abort(last_words)
    try:
        model = LlamaCppBackend(**conn.recv(), progress=progress)
    except errors.SpecchatError as exc:
        conn.send(("error", type(exc).__name__, str(exc)))
        return
    conn.send(("ok", {"n_ctx": model.n_ctx, "n_batch": model.n_batch,
                      "can_truncate": model.can_truncate, "where": model.where}))
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the parent is gone
            break
        if message[0] == "close":
            break
        _, keep, tokens, logits_from, size = message
        try:
            model.truncate(keep)
            before, t0 = model.passes, time.perf_counter()
            rows = model.eval(tokens, logits_from)
            seconds = time.perf_counter() - t0
        except errors.SpecchatError as exc:
            conn.send(("error", type(exc).__name__, str(exc)))
            continue
        rows_out.view(len(rows), model.n_vocab, size)[:] = rows
        conn.send(("ok", (model.passes - before, len(rows), seconds)))
    model.close()


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])), SharedRows(int(sys.argv[2])))
