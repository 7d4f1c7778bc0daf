"""LineStatic: drawn as a Static draws the same text, re-rendering only the lines that changed."""

from __future__ import annotations

import asyncio

from support.renders import rendered_lines
from textual.app import App, ComposeResult
from textual.content import Content
from textual.geometry import Offset
from textual.selection import Selection
from textual.widgets import Static

from specchat.ui.widgets.line_static import LineStatic

TEXTS = [
    Content("hello"),
    Content(""),
    Content("a line break at the end\n"),
    Content("a\n\nblank line between"),
    Content.styled("x" * 100 + "\nshort, after a line that wraps", "bold $text-muted"),
    Content.assemble(Content.styled("red ", "$error"), "words that wrap at the panel's edge " * 3,
                     "\n", Content.styled("last", "italic $success")),
    Content("red " + "words that wrap at the panel's edge " * 3 + "\nlast"),  # the same text, unstyled
]


class Both(App):
    CSS = "Static, LineStatic { width: 40; height: auto; padding: 0 1; border-left: solid $panel; }"

    def compose(self) -> ComposeResult:
        yield Static(id="static")
        yield LineStatic(id="lines")


def drawn(widget) -> list[list]:
    """The widget's rows as drawn: each segment's text, style and position in the text."""
    return [list(strip) for strip in widget.render_lines(widget.region.reset_offset)]


def test_it_draws_every_text_as_a_static_does():
    """Same rows, styles (theme variables resolved) and text positions (what a mouse selection
    reads), after each update and after the theme changes under it."""
    app = Both()

    async def scenario():
        async with app.run_test(size=(80, 30)) as pilot:
            static, lines = app.query_one("#static", Static), app.query_one("#lines", LineStatic)
            for text in TEXTS:
                static.update(text)
                lines.update(text)
                await pilot.pause()
                assert lines.region.height == static.region.height
                assert drawn(lines) == drawn(static), text.plain
            app.theme = "textual-light"  # the colours follow a new theme
            await pilot.pause()
            assert drawn(lines) == drawn(static)

    asyncio.run(scenario())


def test_an_update_renders_only_the_lines_that_changed(monkeypatch):
    app = Both()
    rendered = rendered_lines(monkeypatch)
    numbers = [f"line {n}: {n * n}" for n in range(20)]

    async def scenario():
        async with app.run_test(size=(80, 30)) as pilot:
            lines = app.query_one("#lines", LineStatic)
            lines.update(Content("\n".join(numbers)))
            await pilot.pause()
            rendered.clear()
            numbers[7] = "line 7: changed"
            lines.update(Content("\n".join(numbers)), layout=False)
            await pilot.pause()
            assert rendered == ["line 7: changed"]
            assert lines.content.plain.split("\n")[7] == "line 7: changed"
            assert "".join(s.text for s in drawn(lines)[7]).strip(" │") == "line 7: changed"

    asyncio.run(scenario())


def test_a_selection_shows_as_on_a_static():
    app = Both()
    text = TEXTS[-2]

    async def scenario():
        async with app.run_test(size=(80, 30)) as pilot:
            static, lines = app.query_one("#static", Static), app.query_one("#lines", LineStatic)
            static.update(text)
            lines.update(text)
            await pilot.pause()
            unselected = drawn(lines)
            picked = Selection(Offset(4, 0), Offset(3, 1))
            app.screen.selections = {static: picked, lines: picked}
            await pilot.pause()
            assert drawn(lines) == drawn(static) != unselected
            app.screen.selections = {}
            await pilot.pause()
            assert drawn(lines) == unselected

    asyncio.run(scenario())


def test_text_extended_at_its_end_draws_as_a_static_and_renders_only_the_new_lines(monkeypatch):
    """A reply's settled lines grow at their end: what was drawn is not rendered again."""
    app = Both()
    rendered = rendered_lines(monkeypatch)

    async def scenario():
        async with app.run_test(size=(80, 30)) as pilot:
            static, lines = app.query_one("#static", Static), app.query_one("#lines", LineStatic)
            whole = TEXTS[4]
            lines.update(whole)
            for text in TEXTS[3:]:
                await pilot.pause()
                rendered.clear()
                whole = Content("\n").join([whole, text])
                lines.extend(text)
                static.update(whole)
                await pilot.pause()
                assert rendered == text.split("\n", allow_blank=True)
                assert lines.content.plain == whole.plain
                assert lines.region.height == static.region.height
                assert drawn(lines) == drawn(static), text.plain

    asyncio.run(scenario())
