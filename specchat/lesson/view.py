"""A lesson step as one Rich renderable: where it stands in the lesson, what to say, the
demonstration with where its figures come from, and the question for the room. The app's
lesson screen and the slides draw the same thing."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.text import Text

from specchat.lesson.demos import Demo
from specchat.lesson.script import Lesson


def step_view(lesson: Lesson, index: int, demo: Demo | None, note: str = "") -> RenderableType:
    """Step `index` (from 0); `demo` None while it runs (`note` says what it waits for)."""
    step = lesson.steps[index]
    parts: list[RenderableType] = [
        Text(f"{lesson.title} · step {index + 1} of {len(lesson.steps)}", style="dim"),
        Text(step.title, style="bold underline"), Text()]
    parts += [Text(f"• {line}") for line in step.say]
    parts.append(Rule(style="dim"))
    if demo is None:
        parts.append(Text(note or "running the demonstration…", style="italic"))
    else:
        parts.append(Padding(demo.body, (0, 0, 0, 2)))
        parts += [Text(f"from: {source}", style="dim italic") for source in demo.sources]
    if step.question:
        parts += [Rule(style="dim"), Text(f"For the room: {step.question}", style="bold")]
    return Group(*parts)


def stem(lesson: Lesson, index: int) -> str:
    """The file name of step `index`'s slide: lesson-01-one-token-at-a-time."""
    words = "".join(c if c.isalnum() else "-" for c in lesson.steps[index].title.lower())
    return f"lesson-{index + 1:02d}-" + "-".join(w for w in words.split("-") if w)
