"""Text that redraws only the lines that changed."""

from __future__ import annotations

from itertools import groupby

from rich.segment import Segment
from rich.style import Style
from textual.content import Content
from textual.geometry import Region
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import Widget

from specchat.ui.widgets.one_pass import OneLayoutPass

LineKey = tuple[int, str, tuple]
"""A line of text as drawn: where it is (its index among the lines), its characters and its
styles' spans."""


class LineStatic(OneLayoutPass, Widget):
    """A Static that renders each line of its text once: an update re-renders and repaints the
    lines that changed, not all of them. The numbers beside a reply and the reply's growing
    tail change a few lines a redraw; a Static rendered every line of both, on the CPU that
    llama.cpp would have had (docs/lab/2026-12-07-a-redraw-draws-what-changed.md).

    A line's strips are kept while its text and the width stay the same; a style change (a new
    theme) renders them again. While text is selected, the widget draws as a Static does, so
    the selection shows."""

    DEFAULT_CSS = "LineStatic { height: auto; }"

    def __init__(self, content: Content | str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self._content = Content(content) if isinstance(content, str) else content
        self._strips: list[Strip] = []
        self._kept: dict[LineKey, list[Strip]] = {}
        self._width = 0
        self._line_count = 0
        """The lines of its text as laid out (`_lay_out`, `extend`)."""
        self.auto_links = False  # its texts hold no links: a line's render skips their style

    def render(self) -> Content:
        return self._content

    @property
    def content(self) -> Content:
        return self._content

    @property
    def lines(self) -> int:
        """The lines its text takes at its width (0 before it has a width)."""
        return len(self._strips)

    def update(self, content: Content, *, layout: bool = True) -> None:
        """Show `content`; with `layout`, lay the screen out again (its height may change)."""
        self._content = content
        if layout:
            self.refresh(layout=True)
        self._lay_out()

    def extend(self, content: Content) -> None:
        """Add `content` as lines after the text's last line; only the new lines are rendered,
        so text that grows at its end costs what it adds, not what it holds (the layout pass
        it asks for repaints it whole from the kept strips)."""
        self._content = Content("\n").join([self._content, content])
        self.refresh(layout=True)
        width = self.size.width
        if not width or width != self._width:
            self._lay_out()
            return
        for index, line in enumerate(content.split("\n", allow_blank=True), self._line_count):
            rendered = self._line_strips(line, index, width)
            self._kept[(index, line.plain, tuple(line.spans))] = rendered
            self._strips.extend(rendered)
            self._line_count = index + 1

    def _line_strips(self, line: Content, index: int, width: int) -> list[Strip]:
        """Line `index` of the text as strips (more than one where it wraps)."""
        return [at_line(strip, index)
                for strip in Visual.to_strips(self, line, width, None, self.visual_style)]

    def _lay_out(self) -> None:
        """Render the lines whose text changed and repaint the rows that differ."""
        width = self.size.width
        if width != self._width:
            self._kept, self._width = {}, width
        if not width:
            self._strips = []
            return
        kept: dict[LineKey, list[Strip]] = {}
        strips: list[Strip] = []
        lines = self._content.split("\n", allow_blank=True)
        for index, line in enumerate(lines):
            key = (index, line.plain, tuple(line.spans))
            rendered = self._kept.get(key) or self._line_strips(line, index, width)
            kept[key] = rendered
            strips.extend(rendered)
        old, self._strips, self._kept, self._line_count = self._strips, strips, kept, len(lines)

        def differs(y: int) -> bool:
            return y >= len(old) or y >= len(strips) or old[y] is not strips[y]

        for changed, run in groupby(range(max(len(old), len(strips))), key=differs):
            if changed:  # one repaint a run of changed rows
                ys = list(run)
                self.refresh(Region(0, ys[0], width, len(ys)))

    def render_line(self, y: int) -> Strip:
        if self.text_selection is not None:
            return super().render_line(y)
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)

    def on_resize(self) -> None:
        self._lay_out()
        self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._kept, self._strips = {}, []
        if self.is_mounted:
            self._lay_out()


def at_line(strip: Strip, index: int) -> Strip:
    """A line's strip rendered on its own, its text positions (what a mouse selection reads)
    moved to line `index` of the whole text."""
    if not index:
        return strip
    segments = []
    for text, style, control in strip:
        if style is not None and style._meta and (offset := style.meta.get("offset")):
            style = style + Style.from_meta({"offset": (offset[0], index)})
        segments.append(Segment(text, style, control))
    return Strip(segments, strip.cell_length)
