"""The chat screen's turn part: the thread workers that generate a reply, play a recorded turn
back at its pace, or race target-only against the drafter, and the cancel flag and step gate
they obey. A turn's events wait in its mailbox for the screen's redraw; what cannot wait reaches the
screen as messages (EventsWaiting, StatusLine, WorkerFailed) that bubble up to it; this part
never touches the screen's widgets. A finished race opens the
race screen."""

from __future__ import annotations

import threading
import time

from textual import work
from textual.widget import Widget

from specchat.chat.state import ChatState
from specchat.engine.events import Event, RoundEvent, StopReason, TurnEvent
from specchat.engine.loop import GenerationSettings, SpeculativeEngine
from specchat.errors import SpecchatError
from specchat.keeper import ModelKeeper
from specchat.native import model_thread
from specchat.trace import Trace
from specchat.ui.messages import EventsWaiting, RaceReady, StatusLine, WorkerFailed
from specchat.ui.pacing import EventMailbox, StepGate, round_batches
from specchat.ui.screens.race_screen import RaceScreen


class TypingReader:
    """The message being typed, read on the model thread one read at a time, the latest text
    each time (a one-slot mailbox between the UI thread and the model thread; a turn sent
    meanwhile waits for the read in flight, which is reading it needs anyway)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: tuple[ChatState, str, int] | None = None
        self._reading = False

    def read(self, chat: ChatState, text: str, max_tokens: int) -> None:
        """(UI thread) Read this text next; start the reader where none runs."""
        with self._lock:
            self._next = (chat, text, max_tokens)
            start, self._reading = not self._reading, True
        if start:
            model_thread.submit(self._read_latest)

    def _read_latest(self) -> None:
        """(model thread) Read the latest text until none is left."""
        try:
            while True:
                with self._lock:
                    job, self._next = self._next, None
                    self._reading = job is not None
                if job is None:
                    return
                try:
                    job[0].read_ahead(job[1], job[2])
                except SpecchatError:
                    pass  # a message that cannot be read ahead (too long): Enter says why
        except BaseException:  # unforeseen: the next keystroke starts a reader again
            with self._lock:
                self._reading = False
            raise


class TurnRunner(Widget):
    """One turn at a time; Esc (`stop`) ends it after the round in flight."""

    DEFAULT_CSS = "TurnRunner { display: none; }"

    def __init__(self, replay_speed: float) -> None:
        super().__init__()
        self.replay_speed = replay_speed
        """How fast a race plays back (--speed)."""
        self.cancel = threading.Event()
        self.gate = StepGate()
        self.mailbox = EventMailbox()
        """The turn's events the screen has not drawn yet."""
        self.typing = TypingReader()

    @property
    def busy(self) -> bool:
        return any(w.node is self and w.group == "turn" and not w.is_finished
                   for w in self.app.workers)

    def begin(self) -> None:
        """A new turn: not cancelled, and in step mode waiting for the first Space."""
        self.cancel = threading.Event()
        self.gate.reset()

    def stop(self) -> None:
        self.cancel.set()
        self.gate.step()

    def on_unmount(self) -> None:
        """The app is closing: a running turn ends after the round in flight. The process
        waits for the turn's worker, and a long reply kept the terminal after Ctrl+Q for as
        long as it had left to run (25 s for a 900-token reply)."""
        self.stop()

    @work(thread=True, exclusive=True, group="turn")
    def reply(self, chat: ChatState, text: str, generation: GenerationSettings) -> None:
        """The turn runs on the model thread whole (specchat/native/model_thread.py), this worker
        waiting for it: its passes are not handed over one by one."""
        model_thread.call(lambda: self._reply(chat, text, generation))

    def _reply(self, chat: ChatState, text: str, generation: GenerationSettings) -> None:
        cancel, gate = self.cancel, self.gate
        try:
            for batch in round_batches(chat.turn(text, generation, cancel)):
                self.hand_over(batch)
                if isinstance(batch[-1], RoundEvent):
                    gate.hold(cancel)  # the engine's clock excludes this pause
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc), text))
            return
        model_thread.submit(chat.catch_up)  # while the reply is read, after this turn

    def hand_over(self, batch: list[Event]) -> None:
        """(worker) A round's events, or the turn's end, for the screen: drawn at its next
        redraw, or at once where the turn ended or step-through shows each round."""
        self.mailbox.put(batch)
        if self.gate.on or isinstance(batch[-1], TurnEvent):
            self.post_message(EventsWaiting())

    def read_typed(self, chat: ChatState, text: str, max_tokens: int) -> None:
        """While the user types, between turns: the models read the message so far."""
        if not self.busy:
            self.typing.read(chat, text, max_tokens)

    @work(thread=True, exclusive=True, group="turn")
    def replay(self, trace: Trace, speed: float) -> None:
        """Hand the recorded rounds over when their time comes, like a live turn: step mode
        holds each round for Space (the pause shifts the clock), Esc plays the rest at once."""
        cancel, gate = self.cancel, self.gate
        start = time.monotonic()
        for batch in round_batches(trace.events):
            last = batch[-1]
            if isinstance(last, RoundEvent):
                cancel.wait(max(0.0, start + last.t_s / speed - time.monotonic()))
            self.hand_over(batch)
            if isinstance(last, RoundEvent):
                start += gate.hold(cancel)

    @work(thread=True, exclusive=True, group="turn")
    def race(self, keeper: ModelKeeper, engine: SpeculativeEngine, text: str) -> None:
        """Target-only against the current drafter on `text`, each generated alone."""
        def status(i: int, label: str) -> None:
            self.post_message(StatusLine(f"race: {label}, alone ({i + 1}/2)… (Esc stops)"))

        try:
            lanes = model_thread.call(lambda: keeper.race(engine, text, self.cancel, status))
        except SpecchatError as exc:
            self.post_message(WorkerFailed(str(exc)))
            return
        self.post_message(RaceReady(lanes))

    def on_race_ready(self, message: RaceReady) -> None:
        message.stop()
        stopped = any(e.stop_reason == StopReason.CANCELLED for lane in message.lanes
                      for e in lane.events if isinstance(e, TurnEvent))
        self.post_message(StatusLine("race stopped" if stopped else
                                     "race ready: both lanes recorded"))
        if not stopped:
            self.app.push_screen(RaceScreen(message.lanes, self.replay_speed))
