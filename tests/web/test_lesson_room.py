"""The lesson in a room, in real browsers: the tab opened with the presenter's address leads,
and another tab (its own browser context, its own cookies) shows the presenter's step, which
F8 in that tab proves by the slide it sends; the presenter's address bar keeps no code, and a
second tab of the presenter's own browser on the attendees' address follows too."""

from __future__ import annotations

import re

from support.browser import VIEWPORT, Served, browser, drawn

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
    finally:
        served.stop()
