"""Every llama.cpp pass of this process on one thread: the model thread.

This llama.cpp is built with OpenMP. libgomp keeps a pool of worker threads for each thread that
starts a parallel region, and once its pools hold more threads than the machine has cores, a
wait at a barrier spins only about a hundred times before it sleeps on a futex (its throttled
spin count). ggml's barrier between a pass's operations is an OpenMP barrier, hundreds a pass:
a model evaluated from a second thread (the app loaded on one worker thread and replied on
another; `specchat chat` started a thread a turn) decoded 30-40% slower from then on
(docs/lab/2026-12-03-one-thread-for-llama-cpp.md). So every pass runs on the one thread this
module keeps; a front end that runs its work on a thread of its own runs it here whole
(`submit`), so that its passes are not handed over one by one (about 80 us each), and a
program that asks for every pass on its main thread makes that the model thread (`adopt`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
_thread: threading.Thread | None = None
_serving = False
"""Whether `_thread` is this module's own, taking jobs (else a program's adopted thread)."""
_start_lock = threading.Lock()


def _serve() -> None:
    while True:
        fn, future = _jobs.get()
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to whoever waits for it
                future.set_exception(exc)


def here() -> bool:
    """Whether the calling thread is the model thread."""
    return threading.current_thread() is _thread


def adopt() -> None:
    """Make the calling thread the model thread, before any pass: for a program that runs
    every pass on its main thread (`ask`, `bench`, `tune`), so that none is handed over. No
    other thread may ask for a pass from then on."""
    global _thread
    with _start_lock:
        if _thread is not None and _thread is not threading.current_thread():
            raise RuntimeError("the model thread is already another thread")
        _thread = threading.current_thread()


def submit(fn: Callable[[], T]) -> Future[T]:
    """Run `fn` on the model thread after what it already has to do; its future."""
    global _thread, _serving
    with _start_lock:
        if _thread is None:
            _thread = threading.Thread(target=_serve, name="specchat-llama", daemon=True)
            _serving = True
            _thread.start()
        elif not _serving:
            raise RuntimeError(f"every pass of this program runs on {_thread.name}, which "
                               "takes no work from other threads")
    future: Future[T] = Future()
    _jobs.put((fn, future))
    return future


def call(fn: Callable[[], T]) -> T:
    """`fn()` on the model thread: at once where the caller is on it, else handed over and
    waited for, its exception raised here. Ctrl-C while waiting is raised once `fn` is done:
    a pass is never left running under a model that the interrupted program then frees."""
    if here():
        return fn()
    future = submit(fn)
    try:
        return future.result()
    except KeyboardInterrupt:
        future.exception()  # waits for the pass in flight; its own error gives way to Ctrl-C
        raise
