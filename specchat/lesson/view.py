"""A lesson step as one Rich renderable: where it stands in the lesson, what to say, the
demonstration with where its figures come from, and the question for the room. The app's
lesson screen and the slides draw the same thing."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.text import Text

from specchat.lesson.demos import Demo
from specchat.lesson.script import Lesson, Step, minutes_before


def step_view(lesson: Lesson, index: int, demo: Demo | None, note: str = "",
              presenter: bool = False) -> RenderableType:
    """Step `index` (from 0); `demo` None while it runs (`note` says what it waits for);
    `presenter`: with the answer, the notes and the step's time, which attendees never see."""
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
    if presenter:
        parts += [Rule("for the presenter only", style="dim"), *presenter_lines(lesson, index)]
    return Group(*parts)


def presenter_lines(lesson: Lesson, index: int) -> list[Text]:
    """The step's answer, notes and time, as the presenter's view shows them."""
    step: Step = lesson.steps[index]
    lines = []
    if step.minutes:
        total = minutes_before(lesson, len(lesson.steps))
        lines.append(Text(f"time: {step.minutes:g} min (from minute "
                          f"{minutes_before(lesson, index):g} of {total:g})", style="italic"))
    if step.answer:
        lines.append(Text(f"answer: {step.answer}", style="italic"))
    if step.notes:
        lines.append(Text(f"notes: {step.notes}", style="italic"))
    return lines or [Text("(no answer or notes in the lesson file)", style="dim")]


def presenter_notes(lesson: Lesson) -> str:
    """Every step's answer, notes and time, as a Markdown page beside exported slides."""
    out = [f"# {lesson.title}: the presenter's notes", ""]
    for index, step in enumerate(lesson.steps):
        out += [f"## {index + 1}. {step.title}", ""]
        if step.question:
            out += [f"For the room: {step.question}", ""]
        out += [f"- {line.plain}" for line in presenter_lines(lesson, index)] + [""]
    return "\n".join(out)


def stem(lesson: Lesson, index: int) -> str:
    """The file name of step `index`'s slide: lesson-01-one-token-at-a-time."""
    words = "".join(c if c.isalnum() else "-" for c in lesson.steps[index].title.lower())
    return f"lesson-{index + 1:02d}-" + "-".join(w for w in words.split("-") if w)
