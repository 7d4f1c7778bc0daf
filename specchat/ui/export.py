"""`specchat replay TRACE... --export svg|html --out DIR` and `specchat lesson --export DIR`:
slides without a screen.

Each turn of each trace becomes a slide (ui/slides.py) named after its trace; two or more traces
are also raced headless and the race screen saved as an SVG screenshot by Textual's own
exporter once every lane has finished, so a teacher gets the race's last frame without
playing it.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from textual.theme import Theme

from specchat.chat.history import HistoryStore
from specchat.config import Config
from specchat.errors import SpecchatError
from specchat.lesson.demos import run_demo
from specchat.lesson.exercises import step_demo
from specchat.lesson.recordings import Recordings
from specchat.lesson.script import Lesson
from specchat.lesson.view import presenter_notes, stem, step_view
from specchat.trace import Trace
from specchat.ui.app import SpecchatApp
from specchat.ui.launch import Launch
from specchat.ui.screens.race_screen import LanePanel, RaceScreen
from specchat.ui.slides import (
    FORMATS,
    file_name,
    token_styles,
    trace_slides,
    write_renderable,
    write_slide,
)
from specchat.ui.theming import load_themes

SLIDE_THEME = "specchat-projector"
SCREEN_SIZE = (160, 48)
"""The headless screen a race is drawn on: the app's own layout at a common terminal size."""


async def _race_screenshot(traces: list[Trace], theme: str, path: Path) -> Path:
    with tempfile.TemporaryDirectory() as home:  # the user's config and history stay untouched
        app = SpecchatApp(launch=Launch(race=traces, replay_speed=1e9),
                          config=Config(Path(home) / "config.toml", {"ui": {"theme": theme}}),
                          history=HistoryStore(Path(home) / "history.sqlite3"))
        async with app.run_test(size=SCREEN_SIZE) as pilot:
            for _ in range(200):
                await pilot.pause(0.05)
                screen = app.screen
                if isinstance(screen, RaceScreen) and all(
                        p.done_at is not None for p in screen.query(LanePanel)):
                    break
            else:
                raise SpecchatError("the race did not finish drawing headless")
            screen.speed = 1.0  # the last frame says what a replay at recorded pace says
            screen.tick()
            await pilot.pause()
            return Path(app.save_screenshot(path.name, str(path.parent)))


def _theme(name: str) -> Theme:
    themes = {theme.name: theme for theme in load_themes()}
    if name not in themes:
        raise SpecchatError(f"no theme {name!r}: one of {', '.join(sorted(themes))}")
    return themes[name]


def export(traces: list[tuple[str, Trace]], formats: tuple[str, ...], out: Path,
           theme_name: str = SLIDE_THEME) -> list[Path]:
    """Write every turn of `traces` (name, trace) as slides in `formats`, and the race of two or
    more as an SVG screenshot; return the files written."""
    theme = _theme(theme_name)
    files = [path for name, trace in traces
             for slide in trace_slides(name, trace.prompt, trace.events)
             for path in write_slide(slide, theme, out, formats)]
    if len(traces) > 1 and "svg" in formats:
        out.mkdir(parents=True, exist_ok=True)
        name = "race-" + "-vs-".join(file_name(n, words=12) for n, _ in traces)
        files.append(asyncio.run(_race_screenshot([t for _, t in traces], theme_name,
                                                  out / f"{name}.svg")))
    return files


def export_lesson(lesson: Lesson, recordings: Recordings, out: Path,
                  theme_name: str = SLIDE_THEME, formats: tuple[str, ...] = FORMATS
                  ) -> list[Path]:
    """Every step of the lesson, its demonstration run on `recordings`, as slides."""
    theme = _theme(theme_name)
    styles = token_styles(theme)
    files = []
    for index, step in enumerate(lesson.steps):
        demo = (step_demo(step.exercise, recordings) if step.exercise else
                run_demo(step.demo, recordings, styles))
        view = step_view(lesson, index, demo)
        files += write_renderable(view, theme, out, stem(lesson, index),
                                  f"specchat · {step.title}", formats)
    notes = out / "presenter-notes.md"
    notes.write_text(presenter_notes(lesson), encoding="utf-8")
    return [*files, notes]
