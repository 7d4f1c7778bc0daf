"""The lesson in a room, in real browsers: the tab opened with the presenter's address leads,
and another tab (its own browser context, its own cookies) shows the presenter's step, which
F8 in that tab proves by the slide it sends; the presenter's address bar keeps no code, and a
second tab of the presenter's own browser on the attendees' address follows too. Three
attendees doing an exercise put their own numbers on the presenter's class plot."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from html import unescape

from support.browser import VIEWPORT, Served, browser, drawn, wait_for

PRESENTER_LINE = re.compile(r"the lesson's presenter opens (http://\S+)")


def _slide_of(page) -> str:
    """The step a tab shows, by the slide F8 sends."""
    with page.expect_download(timeout=30_000) as download:
        page.keyboard.press("F8")
    return download.value.suggested_filename


def test_an_attendee_tab_shows_the_step_the_presenter_tab_moved_to(tmp_path, chromium):
    served = Served(tmp_path, "lesson", "--traces")
    try:
        assert served.proc.stdout is not None
        found = PRESENTER_LINE.search(served.proc.stdout.readline())
        assert found, "serve printed no presenter address"
        with browser(chromium) as b:
            attendee = b.new_page(viewport=VIEWPORT)  # each page its own context: no shared cookie
            attendee.goto(served.url)
            drawn(attendee)
            presenters_browser = b.new_context(viewport=VIEWPORT)
            presenter = presenters_browser.new_page()
            presenter.goto(found.group(1))
            drawn(presenter)
            assert "presenter=" not in presenter.url  # the projected address bar keeps no code
            second = presenters_browser.new_page()  # the presenter looks at what the room sees
            second.goto(served.url)
            drawn(second)
            for _ in range(2):
                presenter.wait_for_timeout(1500)
                presenter.keyboard.press("ArrowRight")
            attendee.wait_for_timeout(2000)
            for tab in (attendee, second):
                assert _slide_of(tab).startswith("lesson-03-the-kv-cache-what-each-model-keeps")
            presenter.keyboard.press("ArrowRight")
            second.wait_for_timeout(2000)
            assert _slide_of(second).startswith("lesson-04-the-target-checks-them")
        log = served.stop()  # the websockets' lines come as they close
    finally:
        if served.proc.poll() is None:
            served.stop()
    assert log.count("/ws/lead/") == 1  # the presenter's tab alone holds its code


def _slide_text(page) -> str:
    """The text of the slide F8 sends from a tab: what its screen shows."""
    with page.expect_download(timeout=30_000) as download:
        page.keyboard.press("F8")
    svg = download.value.path().read_text(encoding="utf-8")
    return unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")


SPEEDUP = re.compile(r"(\d+\.\d\dx \(\d+\.\d\d-\d+\.\d\d\))")


def test_three_attendees_run_an_exercise_and_the_presenter_plots_their_runs(tmp_path, tiny,
                                                                            chromium):
    """Each tab loads the tiny pair itself (settings of its own reach it); the presenter
    starts on the k sweep, the attendees follow there and each races its own k."""
    served = Served(tmp_path, "lesson", "--target", str(tiny.target), "--draft",
                    str(tiny.draft), "--tokens", "16", "--start", "8")
    try:
        assert served.proc.stdout is not None
        found = PRESENTER_LINE.search(served.proc.stdout.readline())
        assert found, "serve printed no presenter address"
        with browser(chromium) as b:
            presenter = b.new_page(viewport=VIEWPORT)
            presenter.goto(found.group(1))
            drawn(presenter)
            attendees = [b.new_page(viewport=VIEWPORT) for _ in range(3)]
            for page in attendees:
                page.goto(served.url)
                drawn(page)
            for k, page in enumerate(attendees, 1):
                wait_for(lambda page=page: "Exercise: sweep k" in _slide_text(page),
                         "the attendee at the presenter's exercise", every=2)
                page.keyboard.type(f"--k {k} Write a Python function that adds two numbers.")
                page.keyboard.press("Enter")
            own = [wait_for(lambda page=page: SPEEDUP.findall(_slide_text(page).split(
                "your runs", 1)[-1]), "a tab's own run on its panel", every=2)[0]
                for page in attendees]
            plot = wait_for(lambda: (t := _slide_text(presenter)) and "the room's runs: 3" in t
                            and t, "the room's three runs on the presenter's tab", every=2)
            board = plot.split("the room's best runs", 1)[1]
            assert sorted(SPEEDUP.findall(board)) == sorted(own)  # the tabs' own numbers
            assert "the curve: a model draft's speedup at k=3" in plot
            grid = [line.split("|", 1)[1] for line in plot.splitlines() if "|" in line]
            marks = {c for row in grid for c in row if c.isdigit()}
            assert len(marks) >= 2  # three tabs' marks (two may share a cell)
            refused = urllib.request.Request(served.url + "room/runs", b"{}", method="POST")
            try:
                urllib.request.urlopen(refused, timeout=5)
                raise AssertionError("a post without a tab's token was taken")
            except urllib.error.HTTPError as exc:
                assert exc.code == 403 and exc.read().decode().count("\n") == 0
    finally:
        served.stop()
