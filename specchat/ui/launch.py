"""What the app was started to do besides chatting: warm the models up, replay or race recorded
turns, start in step-through mode or in the lesson. The engine's settings are `Settings`, apart from these."""

from __future__ import annotations

from dataclasses import dataclass, field

from specchat.lesson.script import Lesson
from specchat.trace import Trace


@dataclass
class LessonLaunch:
    lesson: Lesson
    traces_only: bool
    """Run the demonstrations on the shipped traces and load no model."""
    tokens: int
    """Tokens of each reply a live demonstration generates."""
    start: int = 0


@dataclass
class Launch:
    warm_up: bool = True
    """Run a short turn after loading, so the first reply is not timed while weights page in."""
    replay: Trace | None = None
    """Play this recorded turn instead of loading models."""
    replay_speed: float = 1.0
    race: list[Trace] = field(default_factory=list)
    """Play these recorded turns side by side on one clock instead of loading models."""
    step: bool = False
    """Start in step-through mode (F5)."""
    lesson: LessonLaunch | None = None
    """Open the guided lesson on top of the chat (`specchat lesson`)."""
