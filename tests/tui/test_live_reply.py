"""A reply drawn as settled lines and a live tail looks the same as the reply drawn whole; how
often a streaming reply is redrawn."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.pilot import run_async
from support.renders import rendered_lines
from textual.app import App, ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content

from specchat.engine.events import TokenEvent, TokenKind
from specchat.ui.app import SpecchatApp
from specchat.ui.chat.chat_screen import redraw_every_s
from specchat.ui.chat.chat_view import NUMBERS_EVERY, ChatView
from specchat.ui.widgets.live_reply import (
    SETTLE_LINES,
    LiveReply,
    Piece,
    last_line_break,
    styled_pieces,
)
from specchat.ui.widgets.stats_panel import StatsPanel

pieces_st = st.lists(st.tuples(st.sampled_from(list(TokenKind)),
                               st.text(alphabet="ab \n", min_size=1, max_size=6)), max_size=40)


def styled_chars(content: Content) -> list[tuple[str, tuple[str, ...]]]:
    """Each character with the styles that cover it (a line break draws no cell, so none):
    two contents look the same where these are equal, however their spans are cut."""
    styles: list[list[str]] = [[] for _ in content.plain]
    for span in content.spans:
        for i in range(span.start, span.end):
            styles[i].append(str(span.style))
    return [(c, () if c == "\n" else tuple(s)) for c, s in zip(content.plain, styles)]


@settings(max_examples=300, deadline=None)
@given(texts=pieces_st, show_rejected=st.booleans(), lines=st.integers(1, 4),
       own_at=st.sets(st.integers(0, 40), max_size=5),
       lost_at=st.sets(st.integers(0, 40), max_size=5), expand=st.booleans())
def test_settled_lines_and_the_tail_draw_what_the_whole_reply_draws(texts, show_rejected,
                                                                     lines, own_at, lost_at,
                                                                     expand):
    # lost branches in place of some pieces: their tokens may hold a line break, drawn escaped
    pieces = [Piece(kind, "", lost=["b\n", "c"]) if i in lost_at else Piece(kind, text)
              for i, (kind, text) in enumerate(texts)]
    for i in own_at:
        if i < len(pieces):
            pieces[i].own = ["x", "y\n"]
    whole = Content.assemble(*styled_pieces(pieces, show_rejected, (0, 0), (len(pieces), 0),
                                            expand))
    parts, start = [], (0, 0)
    while (last := last_line_break(pieces, start, show_rejected, lines)) is not None:
        part = Content.assemble(*styled_pieces(pieces, show_rejected, start, last, expand))
        assert part.plain.count("\n") >= lines - 1  # a part ends where its last line does
        parts.append(part)
        start = (last[0], last[1] + 1)
    tail = Content.assemble(*styled_pieces(pieces, show_rejected, start, (len(pieces), 0),
                                           expand))
    assert tail.plain.count("\n") < lines  # all that could settle did
    drawn = Content("\n").join([*parts, tail])
    assert styled_chars(drawn) == styled_chars(whole)


def token(kind: TokenKind, text: str) -> TokenEvent:
    return TokenEvent(kind=kind, id=0, text=text, position=0, round=1, p=None, q=None,
                      logit_gap=None, u=None)


class OneReply(App):
    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield LiveReply()


def settled_lines(reply: LiveReply) -> int:
    """How many of the reply's lines settled (drawn by the first of its two widgets)."""
    settled = reply.children[0]
    return settled.content.plain.count("\n") + 1 if settled.display else 0


def test_a_long_reply_settles_its_lines_grows_in_steps_and_toggles_whole(monkeypatch):
    app = OneReply()
    lines = 3 * SETTLE_LINES + 1
    rendered = rendered_lines(monkeypatch)

    async def scenario():
        async with app.run_test(size=(60, 20)) as pilot:
            reply = app.query_one(LiveReply)
            reply.growing = True
            relaid = 0
            for n in range(lines):
                settled, height = settled_lines(reply), reply.size.height
                reply.add_tokens([token(TokenKind.ACCEPTED, f"line {n}"),
                                  token(TokenKind.REJECTED, " no"),
                                  token(TokenKind.CORRECTED, "\n")])
                reply.refresh_content()
                await pilot.pause()
                assert reply.size.height % SETTLE_LINES == 0  # room taken in steps
                assert reply.size.height >= n + 2  # the lines so far and the one growing
                if settled and settled_lines(reply) == settled:
                    # once lines settled, the reply takes room only where more settle
                    assert reply.size.height == height
                relaid += reply.size.height != height
                if settled_lines(reply) == SETTLE_LINES:
                    first_settled = rendered.count("line 0 no")
            assert len(reply.children) == 2  # the settled lines and the tail
            assert settled_lines(reply) == 3 * SETTLE_LINES
            assert relaid == 1 + 3  # the first step, then one a settle
            # lines that settled are not rendered again where more settle after them
            assert rendered.count("line 0 no") == first_settled
            expected = "".join(f"line {n} no\n" for n in range(lines))
            assert reply.drawn == expected
            reply.show_rejected = False
            await pilot.pause()
            assert reply.drawn == expected.replace(" no", "")
            reply.growing = False
            reply.refresh_content()
            await pilot.pause()
            assert reply.size.height == lines + 1  # the reply's own lines, the last one empty

    run_async(scenario)


def test_a_streaming_reply_is_redrawn_half_as_often_on_two_cores():
    """On two cores each redraw is taken from llama.cpp's threads (docs/lab/)."""
    assert redraw_every_s(2) == 2 * redraw_every_s(8) == 0.5
    assert redraw_every_s(None) == redraw_every_s(4) == 0.25


class OneView(App):
    CSS_PATH = SpecchatApp.CSS_PATH

    def compose(self) -> ComposeResult:
        yield ChatView()


def test_a_streaming_reply_s_numbers_are_redrawn_at_every_other_redraw_of_its_text(monkeypatch):
    """A dozen of the numbers' lines change at each redraw; at every other they are drawn."""
    shown: list[int] = []
    show = StatsPanel.show

    def counted(panel, stats, draft, final=None):
        shown.append(len(app.query_one(ChatView).transcript.reply.pieces))  # at which token
        show(panel, stats, draft, final)

    monkeypatch.setattr(StatsPanel, "show", counted)
    app = OneView()

    async def scenario():
        async with app.run_test(size=(100, 30)) as pilot:
            view = app.query_one(ChatView)
            view.open_reply("hi", stepping=False)
            for n in range(5):
                view.transcript.take([token(TokenKind.ACCEPTED, f"word {n} ")])
                view.redraw("draft")
                view.redraw("draft")  # nothing new: not a redraw of the text
                await pilot.pause()
            assert NUMBERS_EVERY == 2 and shown == [1, 3, 5]

    run_async(scenario)


def test_the_view_follows_a_growing_reply_until_the_user_scrolls_away_and_again_at_the_end():
    app = OneView()

    async def scenario():
        async with app.run_test(size=(100, 30)) as pilot:
            view = app.query_one(ChatView)
            transcript = view.transcript
            view.open_reply("hi", stepping=False)

            async def lines(n: int) -> None:
                for i in range(n):
                    transcript.take([token(TokenKind.ACCEPTED, f"line {i}\n")])
                    view.redraw("draft")
                    await pilot.pause()

            await lines(3 * SETTLE_LINES)
            assert transcript.max_scroll_y > 0 and transcript.scroll_y == transcript.max_scroll_y
            transcript.scroll_home(animate=False, immediate=True)  # the user scrolls up to read
            await lines(SETTLE_LINES)
            assert transcript.scroll_y == 0 < transcript.max_scroll_y
            transcript.scroll_end(animate=False, immediate=True)  # and back down
            await lines(SETTLE_LINES)
            assert transcript.scroll_y == transcript.max_scroll_y
            view.fail("the model stopped", None)  # a reply that ends in an error ends the anchor
            assert not transcript.is_anchored  # (anchored text shorter than the view sits low)

    run_async(scenario)
