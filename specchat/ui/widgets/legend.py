"""What each token colour means, in the theme's colours."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from specchat.engine.events import TokenKind
from specchat.ui.theming import LEGEND_TEXT, token_style
from specchat.wording import UNSEEN_REJECTED


class Legend(Static):
    """What each token colour means, in the theme's own colours."""

    def on_mount(self) -> None:
        self.show()

    def show(self, counted_rejections: bool = False) -> None:
        """`counted_rejections`: replies come from a server that counts rejected drafts
        without their text, so the legend says what their mark means."""
        parts = []
        for kind, label in LEGEND_TEXT.items():
            if kind is TokenKind.REJECTED and counted_rejections:
                label += f" ({UNSEEN_REJECTED}: count only)"
            parts += [Content.styled(f" {label} ", token_style(kind)), Content(" ")]
        self.update(Content.assemble(*parts))
