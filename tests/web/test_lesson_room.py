"""The lesson in a room, in real browsers: the tab opened with the presenter's address leads,
and another tab (its own browser context, its own cookies) shows the presenter's step, which
F8 in that tab proves by the slide it sends."""

from __future__ import annotations

import re

from support.browser import VIEWPORT, Served, browser, drawn

PRESENTER_LINE = re.compile(r"the lesson's presenter opens (http://\S+)")


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
            presenter = b.new_page(viewport=VIEWPORT)
            presenter.goto(found.group(1))
            drawn(presenter)
            for _ in range(2):
                presenter.wait_for_timeout(1500)
                presenter.keyboard.press("ArrowRight")
            attendee.wait_for_timeout(2000)
            with attendee.expect_download(timeout=30_000) as download:
                attendee.keyboard.press("F8")
            assert download.value.suggested_filename.startswith(
                "lesson-03-the-target-checks-them-in-one-pass")
    finally:
        served.stop()
