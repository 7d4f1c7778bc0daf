"""The messages the app's thread workers post with what they made; the screen that started a
worker takes them on the UI thread, so no screen state changes off it."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from specchat.chat.state import Session
from specchat.costs import Costs
from specchat.engine.drafters import Drafter
from specchat.engine.loop import SpeculativeEngine
from specchat.trace import Lane


class EventsWaiting(Message):
    """A turn's events wait in its mailbox (`EventMailbox`) that are drawn now, not at the next
    redraw: the turn's end, or a round in step-through."""


@dataclass
class WorkerFailed(Message):
    error: str
    message: str | None = None
    """The message of a turn that failed: the open reply says so, and the message goes back
    into an empty input box, so Enter sends it again."""


@dataclass
class ModelsReady(Message):
    engine: SpeculativeEngine


@dataclass
class ServerReady(Message):
    session: Session
    where: str


@dataclass
class DrafterReady(Message):
    drafter: Drafter
    choice: str
    """What it was loaded from, as --draft takes it (the config file keeps this)."""


@dataclass
class TargetReady(Message):
    engine: SpeculativeEngine
    note: str


@dataclass
class RaceReady(Message):
    lanes: list[Lane]


@dataclass
class StatusLine(Message):
    text: str
    input: bool | None = None
    """Whether the input box takes keys now (None: as it was)."""


@dataclass
class ChatStarted(Message):
    """The models (or a llama-server) are ready and the conversation is open."""

    where: str
    server: bool


@dataclass
class CostsMeasured(Message):
    costs: Costs | None
    error: str = ""
    busy: str = ""
    """Other programs took the CPU while the costs were timed: say so (M times again)."""
