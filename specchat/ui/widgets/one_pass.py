"""Widgets whose growth costs the screen one layout pass, not two."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.geometry import Size

if TYPE_CHECKING:
    from textual.widget import Widget as _Widget
else:  # a mixin, not a DOMNode: Textual takes a widget's default CSS from its first DOMNode base
    _Widget = object


class OneLayoutPass(_Widget):
    """A widget whose virtual size is set by the layout pass that placed it, without asking
    for another.

    Textual's `virtual_size` asks for a layout when it changes, so a pass that resized a widget
    is followed by a second pass (and the whole screen drawn again) that places nothing anew:
    the first pass arranged the widget's children at that size already. A scrollbar that must
    appear or go still asks for its pass. On two cores, the second pass of each step a growing
    reply took came out of llama.cpp's time (docs/lab/2026-12-08-one-layout-pass-a-step.md).
    Put it first among the bases: `class Reply(OneLayoutPass, Vertical)`.
    """

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size,
                      layout: bool = True) -> bool:
        return super()._size_updated(size, virtual_size, container_size, layout=False)
