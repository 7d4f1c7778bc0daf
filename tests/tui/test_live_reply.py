"""A reply drawn as settled lines and a live tail looks the same as the reply drawn whole; how
often a streaming reply is redrawn."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from support.pilot import run_async
from textual.app import App, ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content

from specchat.engine.events import TokenEvent, TokenKind
from specchat.ui.chat.chat_screen import redraw_every_s
from specchat.ui.widgets.live_reply import (
    SETTLE_LINES,
    LiveReply,
    Piece,
    last_line_break,
    styled_pieces,
)

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


def test_a_long_reply_settles_its_lines_grows_in_steps_and_toggles_whole():
    app = OneReply()
    lines = 3 * SETTLE_LINES + 1

    async def scenario():
        async with app.run_test(size=(60, 20)) as pilot:
            reply = app.query_one(LiveReply)
            reply.growing = True
            relaid = 0
            for n in range(lines):
                settled, height = len(reply.children) - 1, reply.size.height
                reply.add_tokens([token(TokenKind.ACCEPTED, f"line {n}"),
                                  token(TokenKind.REJECTED, " no"),
                                  token(TokenKind.CORRECTED, "\n")])
                reply.refresh_content()
                await pilot.pause()
                assert reply.size.height % SETTLE_LINES == 0  # room taken in steps
                assert reply.size.height >= n + 2  # the lines so far and the one growing
                if settled and len(reply.children) - 1 == settled:
                    # once lines settled, the reply takes room only where more settle
                    assert reply.size.height == height
                relaid += reply.size.height != height
            assert len(reply.children) == 4  # three settled widgets and the tail
            assert relaid == 1 + 3  # the first step, then one a settle
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
