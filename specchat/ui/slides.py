"""Slides of a turn: the reply in its verdict colours, the legend and the turn's stats, written
as SVG and HTML by Rich's own exporters in a theme's colours, named after the conversation and
the turn so a teacher finds them in a folder.

A slide is drawn from the same pieces the transcript draws ((kind, text) of each token) and the
same stats line `ask` prints, so what a slide says is what the screen said.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

from rich.color import Color
from rich.console import Console, Group, RenderableType
from rich.style import Style
from rich.terminal_theme import TerminalTheme
from rich.text import Text
from textual.theme import Theme

from specchat.engine.events import Event, TokenEvent, TokenKind, TurnEvent
from specchat.ui.theming import DEFAULT_TOKEN_COLOURS, LEGEND_TEXT, TOKEN_VARIABLES
from specchat.wording import shown_text, stats_line

FORMATS = ("svg", "html")
SLIDE_WIDTH = 100
"""Columns of a slide: wide enough for a code line, narrow enough to read from the back row."""
DEFAULT_DIR = Path("specchat-slides")
"""Where the app writes slides: a folder in the directory specchat was started in."""


@dataclass
class TurnSlide:
    conversation: str
    """The conversation's name in file names (a trace's name, or chat-ID-first-words)."""
    number: int
    """The turn's place in the conversation, from 1."""
    prompt: str
    pieces: list[tuple[TokenKind, str]]
    turn: TurnEvent

    @property
    def stem(self) -> str:
        return f"{self.conversation}-turn-{self.number}"


def file_name(text: str, words: int = 6) -> str:
    """A file-name-safe form of a name or the first words of a message."""
    slug = "-".join(re.findall(r"[a-z0-9.]+", text.lower())[:words]).strip(".-")
    return slug or "untitled"


def pieces_of(events: list[Event]) -> list[tuple[TokenKind, str]]:
    return [(e.kind, shown_text(e)) for e in events if isinstance(e, TokenEvent)]


def trace_slides(name: str, prompt: str, events: list[Event]) -> list[TurnSlide]:
    """The turns of a recorded event stream: each ends at its TurnEvent."""
    slides: list[TurnSlide] = []
    since = 0
    for i, event in enumerate(events):
        if isinstance(event, TurnEvent):
            slides.append(TurnSlide(file_name(name, words=12), len(slides) + 1,
                                    prompt if not slides else "", pieces_of(events[since:i]),
                                    event))
            since = i + 1
    return slides


def _rgb(theme: Theme, name: str, fallback: str) -> tuple[int, int, int]:
    colour = Color.parse(getattr(theme, name, None) or fallback).get_truecolor()
    return colour.red, colour.green, colour.blue


def terminal_theme(theme: Theme) -> TerminalTheme:
    """The exporters' page: the theme's background and foreground (ANSI colours unused: every
    style on a slide is a theme colour)."""
    background = _rgb(theme, "background", "#1e1e1e" if theme.dark else "#ffffff")
    foreground = _rgb(theme, "foreground", "#e0e0e0" if theme.dark else "#000000")
    return TerminalTheme(background, foreground, [foreground] * 8)


def token_styles(theme: Theme) -> dict[TokenKind, Style]:
    colours = {**DEFAULT_TOKEN_COLOURS, **theme.variables}
    return {kind: Style(color=colours[var], strike=kind is TokenKind.REJECTED)
            for kind, var in TOKEN_VARIABLES.items()}


def slide(turn_slide: TurnSlide, theme: Theme, show_rejected: bool = True) -> Group:
    """The turn as one renderable: prompt, reply in verdict colours, legend, stats."""
    styles = token_styles(theme)
    reply = Text()
    for kind, text in turn_slide.pieces:
        if show_rejected or kind is not TokenKind.REJECTED:
            reply.append(text, styles[kind])
    legend = Text("  ").join(Text(f" {label} ", styles[kind]) for kind, label in LEGEND_TEXT.items())
    parts = [Text(f"Turn {turn_slide.number}", style="bold")]
    if turn_slide.prompt:
        parts.append(Text(f"> {turn_slide.prompt}", style="bold"))
    items = [item for item in stats_line(turn_slide.turn).split(" · ") if item]
    parts += [reply, Text(), legend, Text(), Text(" · ".join(items))]
    return Group(*parts)


def write_slide(turn_slide: TurnSlide, theme: Theme, out: Path,
                formats: tuple[str, ...] = FORMATS, show_rejected: bool = True) -> list[Path]:
    """Write the turn as `<conversation>-turn-<n>.svg` and `.html` in `out`; return the files."""
    return write_renderable(slide(turn_slide, theme, show_rejected), theme, out, turn_slide.stem,
                            f"specchat · {turn_slide.conversation} · turn {turn_slide.number}",
                            formats)


def write_renderable(renderable: RenderableType, theme: Theme, out: Path, stem: str, title: str,
                     formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """Write anything Rich draws as `<stem>.svg` and `.html` in `out`, SLIDE_WIDTH wide, in
    the theme's page colours; return the files."""
    out.mkdir(parents=True, exist_ok=True)
    console = Console(record=True, width=SLIDE_WIDTH, file=io.StringIO(), color_system="truecolor",
                      force_terminal=True)
    console.print(renderable)
    page = terminal_theme(theme)
    written = []
    for fmt in formats:
        path = out / f"{stem}.{fmt}"
        if fmt == "svg":
            text = console.export_svg(title=title, theme=page, clear=False)
        else:
            text = console.export_html(theme=page, inline_styles=True, clear=False)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
