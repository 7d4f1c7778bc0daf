"""The lesson's text: one TOML file a presenter can edit or translate (lessons/ holds the
shipped one). Each step names the demonstration it runs; the file's prompts are what the
live demonstrations generate from."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from specchat.errors import SpecchatError
from specchat.resources import resource_dir

PROMPT_KINDS = ("code", "prose", "short", "domain", "edit")
"""The prompts a lesson file gives: the kinds the demonstrations generate (and the shipped
traces were recorded) on."""


@dataclass(frozen=True)
class Step:
    title: str
    say: tuple[str, ...]
    question: str
    demo: str
    answer: str = ""
    """The answer to the question: the presenter's alone."""
    notes: str = ""
    """What the presenter may add: the presenter's alone."""
    minutes: float = 0.0
    """The time the step is given (0: not said)."""
    exercise: str = ""
    """The room's exercise this step sets (lesson/exercises.py), or none: then `demo` runs."""


@dataclass(frozen=True)
class Lesson:
    title: str
    steps: tuple[Step, ...]
    prompts: dict[str, str]
    path: Path


def default_path() -> Path:
    return resource_dir("lessons") / "speculative-decoding.toml"


def load_lesson(path: Path | None, demos: frozenset[str],
                exercises: frozenset[str] | None = None) -> Lesson:
    """The lesson in `path` (the shipped one by default); a SpecchatError names what is wrong
    (a missing field, a demonstration or exercise specchat does not know, a prompt kind left
    out). `exercises`: the names a step may set (specchat's own by default)."""
    if exercises is None:
        from specchat.lesson.exercises import EXERCISES

        exercises = frozenset(EXERCISES)
    path = path or default_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecchatError(f"lesson file not found: {path}") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SpecchatError(f"cannot read the lesson {path}: {exc}") from None
    prompts = data.get("prompts", {})
    missing = [kind for kind in PROMPT_KINDS if not isinstance(prompts.get(kind), str)]
    if missing:
        raise SpecchatError(f"{path}: [prompts] needs {', '.join(missing)}")
    steps = []
    for n, raw in enumerate(data.get("step", []), start=1):
        try:
            step = Step(str(raw["title"]), tuple(str(line) for line in raw["say"]),
                        str(raw.get("question", "")),
                        str(raw["demo"] if "exercise" not in raw else raw.get("demo", "")),
                        str(raw.get("answer", "")), str(raw.get("notes", "")),
                        float(raw.get("minutes", 0)), str(raw.get("exercise", "")))
        except (KeyError, TypeError, ValueError):
            raise SpecchatError(f"{path}: step {n} needs title, say (a list of lines) and "
                                "demo (or exercise); minutes, where given, is a number") from None
        if step.exercise and step.exercise not in exercises:
            raise SpecchatError(f"{path}: step {n} ({step.title}) sets exercise "
                                f"'{step.exercise}', which is none of "
                                f"{', '.join(sorted(exercises))}")
        if step.minutes < 0:
            raise SpecchatError(f"{path}: step {n} ({step.title}): minutes {step.minutes:g} "
                                "is less than 0")
        if step.demo not in demos and not (step.exercise and not step.demo):
            raise SpecchatError(f"{path}: step {n} ({step.title}) runs demo '{step.demo}', "
                                f"which is none of {', '.join(sorted(demos))}")
        steps.append(step)
    if not steps:
        raise SpecchatError(f"{path}: no [[step]] in it")
    return Lesson(str(data.get("title", "specchat lesson")), tuple(steps), dict(prompts), path)


def minutes_before(lesson: Lesson, index: int) -> float:
    """The minutes the steps before step `index` are given."""
    return sum(step.minutes for step in lesson.steps[:index])
