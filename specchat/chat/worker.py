"""A turn in a worker thread for the line-based front ends (`specchat chat`, the benchmarks):
the main thread prints and saves its events, and Ctrl-C stops the reply instead of the
program."""

from __future__ import annotations

import contextlib
import queue
import signal
import threading
from collections.abc import Callable, Iterator

from specchat.engine.events import Event
from specchat.native import model_thread


def in_worker(turn: Callable[[threading.Event], Iterator[Event]]) -> Iterator[Event]:
    """Run a turn on the model thread (specchat/native/model_thread.py: every pass on one thread, or
    llama.cpp slows down), its events yielded here. Ctrl-C sets its cancel flag, and the
    engine ends the turn cleanly after the round in flight (caches consistent, reply kept). Ctrl-C is taken by a
    signal handler for the whole turn, so it stops the reply whatever the main thread is doing
    (printing a token, saving the reply) instead of ending specchat."""
    cancel = threading.Event()
    items: queue.SimpleQueue[Event | BaseException | None] = queue.SimpleQueue()

    def work() -> None:
        try:
            for event in turn(cancel):
                items.put(event)
        except BaseException as exc:  # handed to the main thread, which raises it
            items.put(exc)
        finally:
            items.put(None)

    model_thread.submit(work)
    with stop_on_ctrl_c(cancel):
        try:
            while True:
                item = items.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:  # a caller that stops listening stops the turn: the model thread is shared
            cancel.set()


@contextlib.contextmanager
def stop_on_ctrl_c(cancel: threading.Event) -> Iterator[None]:
    """While inside, Ctrl-C (SIGINT) sets `cancel` instead of raising KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
