"""Which lines a LineStatic renders: what a redraw that renders only what changed is checked by."""

from __future__ import annotations

from textual.content import Content
from textual.visual import Visual

from specchat.ui.widgets.line_static import LineStatic


def rendered_lines(monkeypatch) -> list[str]:
    """A list that takes the text of each line a LineStatic renders into strips, in order."""
    rendered: list[str] = []
    to_strips = Visual.to_strips

    def counted(widget, visual, *args, **kwargs):
        if isinstance(widget, LineStatic) and isinstance(visual, Content):
            rendered.append(visual.plain)
        return to_strips(widget, visual, *args, **kwargs)

    monkeypatch.setattr(Visual, "to_strips", counted)
    return rendered
