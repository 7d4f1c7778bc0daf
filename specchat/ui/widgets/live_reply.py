"""The reply as it grows: coloured pieces drawn as settled lines and a live tail."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.reactive import reactive

from specchat.engine.events import TokenEvent, TokenKind, TurnEvent
from specchat.ui.theming import token_style
from specchat.ui.widgets.line_static import LineStatic
from specchat.ui.widgets.one_pass import OneLayoutPass
from specchat.wording import shown_text

SETTLE_LINES = 12
"""A reply in flight takes room in steps of this many lines (blank until written): the screen
is laid out again, and drawn whole, once a step instead of at every new line. Once its live
tail holds this many lines, the finished ones move to the end of the settled lines, which
render only what they add: a redraw renders only the lines still growing, and a step is the
one layout pass (docs/lab/2026-12-07-a-redraw-draws-what-changed.md,
docs/lab/2026-12-08-one-layout-pass-a-step.md)."""

BRANCHES_LOST = "↳"
"""Before the count of a round's draft-tree branches that lost (or, expanded, their tokens),
where rejected drafts show."""

Mark = tuple[int, int]
"""A place in a reply: a piece's index and how many of its characters come before it."""


@dataclass
class Piece:
    """One piece of a reply as drawn: a token's text in its verdict's kind, or a round's lost
    draft-tree branches (a refused piece of their tokens, drawn as their count or expanded)."""

    kind: TokenKind
    text: str = ""
    lost: list[str] = field(default_factory=list)
    """The lost branches' tokens (the piece is those branches, its `text` empty)."""
    own: list[str] = field(default_factory=list)
    """The draft's own tokens (another vocabulary) of the round whose draft tokens end before
    this piece: drawn before it, where rejected drafts show."""

    def shown(self, expand: bool) -> str:
        """The piece's text on screen (a line break only ever in a token's own text)."""
        if not self.lost:
            return self.text
        return lost_branches_text(self.lost) if expand else f"{BRANCHES_LOST}{len(self.lost)}"


class LiveReply(OneLayoutPass, Vertical):
    """A reply as token verdicts: each piece styled by its kind through theme variables.

    Rejected drafts stay in the list at the place they were refused and are drawn only while
    `show_rejected` is on, so toggling it redraws without losing anything; a round's lost
    draft-tree branches are drawn as their count, or with `expand_branches` as their tokens. The same switch
    shows, after each round drafted in another vocabulary, the draft model's own tokens (what it
    wrote before its text became the target's tokens). The reply is drawn as settled lines
    and a live tail (`SETTLE_LINES`).
    """

    DEFAULT_CSS = """
    LiveReply { height: auto; }
    """

    show_rejected: reactive[bool] = reactive(True)
    expand_branches: reactive[bool] = reactive(False)

    def __init__(self, *, role: str = "assistant", **kwargs) -> None:
        super().__init__(**kwargs)
        self.pieces: list[Piece] = []
        self.own_after: list[str] = []
        """The draft's own tokens of the last round where no piece follows them yet (the next
        piece takes them)."""
        self.turn: TurnEvent | None = None
        """The finished turn's numbers (a reply shown from the history has none)."""
        self.note = ""
        self.growing = False
        """The reply is in flight: it takes room in steps of `SETTLE_LINES` (`refresh_content`)."""
        self._settled_lines = LineStatic("")
        """The lines that settled, drawn once each (hidden until the first settles)."""
        self._settled_lines.display = False
        self._tail = LineStatic("")
        self._tail_from: Mark = (0, 0)
        self._height: int | None = None
        self._lost_round: int | None = None
        """The round whose lost branches the last piece holds."""
        self.add_class(role)

    def compose(self) -> ComposeResult:
        yield self._settled_lines
        yield self._tail

    def add_tokens(self, events: list[TokenEvent]) -> None:
        """Take the tokens; the app redraws at its own pace with `refresh_content`. A draft
        tree's branches that lost in a round are one rejected piece, their count (`↳n`); the
        step-through lays each out."""
        for e in events:
            if e.branch and e.kind is TokenKind.REJECTED:
                if self._lost_round != e.round:  # else the last piece holds this round's
                    self._append(Piece(TokenKind.REJECTED))
                self.pieces[-1].lost.append(shown_text(e))
                self._lost_round = e.round
            else:
                self._append(Piece(e.kind, shown_text(e)))
                self._lost_round = None

    def _append(self, piece: Piece) -> None:
        piece.own, self.own_after = self.own_after, []
        self.pieces.append(piece)

    def add_draft_own(self, pieces: list[str]) -> None:
        """The draft's own tokens of the round whose tokens came last (none: nothing to add),
        placed after that round's draft tokens, before the target's correction or bonus."""
        if not pieces:
            return
        last = self.pieces[-1] if self.pieces else None
        if last is not None and last.kind in (TokenKind.CORRECTED, TokenKind.BONUS):
            last.own = list(pieces)
        else:
            self.own_after = list(pieces)

    @property
    def plain(self) -> str:
        """The reply's text, refused drafts and lost branches (their count) in it."""
        return "".join(p.shown(False) for p in self.pieces)

    def drawn_pieces(self) -> list[tuple[TokenKind, str]]:
        """Each piece's kind and text as drawn (lost branches as their count)."""
        return [(p.kind, p.shown(False)) for p in self.pieces]

    @property
    def drawn(self) -> str:
        """The text on screen, settled lines and tail."""
        settled = [self._settled_lines.content] if self._settled_lines.display else []
        return "\n".join(c.plain for c in [*settled, self._tail.content])

    def set_plain(self, text: str, kind: TokenKind = TokenKind.TARGET) -> None:
        self.pieces, self.own_after = [Piece(kind, text)], []
        self._unsettle()

    def watch_show_rejected(self) -> None:
        self._unsettle()

    def watch_expand_branches(self) -> None:
        self._unsettle()

    def _unsettle(self) -> None:
        """Draw the whole reply again, from its first line (what is shown of it changed)."""
        self._settled_lines.update(Content(""))
        self._settled_lines.display = False
        self._tail_from, self._height = (0, 0), None
        self.refresh_content()

    def refresh_content(self) -> None:
        """Redraw the tail; lay the screen out again only when the room the reply takes changed
        (a layout pass, and the whole screen drawn again as the view follows, cost CPU that
        llama.cpp would otherwise have)."""
        if self.is_mounted:
            self._settle()
        shown = self._shown(self._tail_from, (len(self.pieces), 0))
        if self.own_after and self.show_rejected:  # a round that ended the reply: after it
            shown.append(draft_own_text(self.own_after))
        if self.note:
            shown.append(Content.styled(f"  [{self.note}]", "italic $text-muted"))
        self._tail.update(Content.assemble(*shown) if shown else Content(""), layout=False)
        height = self._tail.lines or None  # none before the tail has a width
        if height is not None and self.growing:
            height = -(-height // SETTLE_LINES) * SETTLE_LINES
        if height is None or height != self._height:
            self._tail.styles.height = height if height is not None and self.growing else "auto"
            self._tail.refresh(layout=True)
        self._height = height

    def _settle(self) -> None:
        """Move the tail's finished lines into a widget of their own once it holds
        `SETTLE_LINES`."""
        last = last_line_break(self.pieces, self._tail_from, self.show_rejected)
        if last is None:
            return
        settled = Content.assemble(*self._shown(self._tail_from, last))
        if self._settled_lines.display:
            self._settled_lines.extend(settled)
        else:
            self._settled_lines.update(settled)
            self._settled_lines.display = True
        self._tail_from = (last[0], last[1] + 1)

    def _shown(self, start: Mark, end: Mark) -> list[Content]:
        return styled_pieces(self.pieces, self.show_rejected, start, end, self.expand_branches)


def last_line_break(pieces: Sequence[Piece], start: Mark, show_rejected: bool,
                    lines: int = SETTLE_LINES) -> Mark | None:
    """Where the last line break drawn after `start` is, if `lines` or more are drawn there
    (a line break is only ever in a token's text)."""
    count, last = 0, None
    for i in range(start[0], len(pieces)):
        kind, text = pieces[i].kind, pieces[i].text
        if show_rejected or kind is not TokenKind.REJECTED:
            from_char = start[1] if i == start[0] else 0
            count += text.count("\n", from_char)
            if "\n" in text[from_char:]:
                last = (i, text.rindex("\n"))
    return last if count >= lines else None


def styled_pieces(pieces: Sequence[Piece], show_rejected: bool, start: Mark, end: Mark,
                  expand: bool = False) -> list[Content]:
    """The styled text of a reply from `start` up to `end` (a piece's characters before the
    mark belong before it): each piece drawn as its kind, the draft's own tokens before the
    piece they were placed at (where rejected drafts show), and lost branches as their count,
    or with `expand` as their tokens (either has no line break, so no mark falls inside it)."""
    shown = []
    for i in range(start[0], min(end[0] + 1, len(pieces))):
        piece = pieces[i]
        text = piece.shown(expand)
        lo = start[1] if i == start[0] else 0
        hi = end[1] if i == end[0] else len(text)
        if piece.own and show_rejected and not lo:
            shown.append(draft_own_text(piece.own))
        if (show_rejected or piece.kind is not TokenKind.REJECTED) and hi > lo:
            shown.append(Content.styled(text[lo:hi], token_style(piece.kind)))
    return shown


def lost_branches_text(tokens: list[str]) -> str:
    """A round's lost draft-tree branches, expanded: each branch token, escaped as the draft's
    own tokens are (a line break in one must not break the reply's line)."""
    return BRANCHES_LOST + "[" + "|".join(repr(token)[1:-1] for token in tokens) + "]"


def draft_own_text(pieces: list[str]) -> Content:
    """A round's draft tokens in the draft's own vocabulary, as the transcript shows them."""
    return Content.styled("⟨draft: " + "·".join(repr(p)[1:-1] for p in pieces) + "⟩",
                          "italic $text-muted")
