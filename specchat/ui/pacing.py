"""How a turn's events reach the screen: cut into one batch a round, left in a mailbox that the
UI empties at its redraw, and held after each round in step-through mode. No Textual in it: the
worker thread and the UI thread share it."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator

from specchat.engine.events import Event, RoundEvent, TurnEvent


class StepGate:
    """Step-through mode, shared by the UI thread (which turns it on and lets rounds go) and
    the worker (which waits here after each round). Both sides only touch threading.Events."""

    def __init__(self) -> None:
        self._on = threading.Event()
        self._next = threading.Event()
        self._held = threading.Event()

    @property
    def on(self) -> bool:
        return self._on.is_set()

    @property
    def held(self) -> bool:
        """Whether a round is held now, waiting for `step` (none can come until it is let go)."""
        return self._held.is_set()

    def switch(self, on: bool) -> None:
        if on:
            self._on.set()
        else:
            self._on.clear()
            self._next.set()  # a worker waiting now runs on

    def step(self) -> None:
        """Let the waiting round go (Space, Esc)."""
        self._next.set()

    def reset(self) -> None:
        self._next.clear()

    def hold(self, cancel: threading.Event) -> float:
        """In step mode (and not stopping), wait for `step`; return the seconds waited."""
        if not self.on or cancel.is_set():
            return 0.0
        paused = time.monotonic()
        self._held.set()
        try:
            self._next.wait()
        finally:
            self._held.clear()
        self._next.clear()
        return time.monotonic() - paused


class EventMailbox:
    """The rounds' events the UI has not taken yet. The worker puts each round's batch here and
    the UI takes them all when it redraws: a message a round woke the UI thread forty times a
    second on a list, on the CPU llama.cpp would have had, for nothing drawn before the
    redraw. Only the worker puts and only the UI thread takes."""

    def __init__(self) -> None:
        self._batches: deque[list[Event]] = deque()

    def put(self, batch: list[Event]) -> None:
        self._batches.append(batch)

    def take(self) -> list[list[Event]]:
        """Every batch put since the last take, oldest first."""
        taken = []
        while self._batches:
            taken.append(self._batches.popleft())
        return taken


def round_batches(events: Iterable[Event]) -> Iterator[list[Event]]:
    """The stream cut after each round summary and after the turn summary: what the UI draws at
    once."""
    batch: list[Event] = []
    for event in events:
        batch.append(event)
        if isinstance(event, (RoundEvent, TurnEvent)):
            yield batch
            batch = []
