"""A rehearsal: every step's demonstration run once, as the room would see it, with the time it
took beside the minutes the lesson gives the step, and each figure whose prediction and
measurement disagree (a slide that would contradict itself in front of the room)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from rich.style import Style

from specchat.engine.events import TokenKind
from specchat.errors import SpecchatError
from specchat.lesson.demos import run_demo
from specchat.lesson.exercises import step_demo
from specchat.lesson.figures import Check
from specchat.lesson.recordings import Recordings
from specchat.lesson.script import Lesson

PLAIN = {kind: Style() for kind in TokenKind}


@dataclass(frozen=True)
class Rehearsed:
    index: int
    title: str
    minutes: float
    seconds: float
    """How long its demonstration took to make (recordings shared with an earlier step were
    made there)."""
    checks: tuple[Check, ...]
    error: str = ""

    @property
    def disagreeing(self) -> list[Check]:
        return [c for c in self.checks if not c.agrees]


def rehearse(lesson: Lesson, recordings: Recordings) -> Iterator[Rehearsed]:
    """Each step in order, as soon as its demonstration is made."""
    for index, step in enumerate(lesson.steps):
        start = time.perf_counter()
        try:
            demo = (step_demo(step.exercise, recordings) if step.exercise else
                    run_demo(step.demo, recordings, PLAIN))
            checks, error = demo.checks, ""
        except SpecchatError as exc:
            checks, error = (), str(exc)
        yield Rehearsed(index, step.title, step.minutes, time.perf_counter() - start, checks,
                        error)


def report_line(r: Rehearsed) -> str:
    """One step as the rehearsal prints it."""
    planned = f"{r.minutes:g} min" if r.minutes else "no time given"
    agreed = sum(c.agrees for c in r.checks)
    figures = (f"{agreed} of {len(r.checks)} predicted figures agree" if r.checks
               else "no predicted figure")
    line = f"{r.index + 1:>2}. {r.title:<40} {r.seconds:6.1f} s  ({planned}; {figures})"
    if r.error:
        line += f"\n    FAILED: {r.error}"
    for check in r.disagreeing:
        line += f"\n    DISAGREES: {check.line()}"
    return line
