"""`specchat serve` in a real browser: headless Chromium opens the page, the app in it answers a
typed message on the tiny models (whose slides F8 sends to the browser) and plays a shipped
trace, and the verdict colours reach the screen's pixels."""

from __future__ import annotations

import re
import subprocess
import sys
from html import unescape

from support.browser import TRANSCRIPT, VIEWPORT, Served, browser, colour_pixels, drawn, send_typed_message, wait_for
from support.processes import saved_messages, saved_replies, specchat, specchat_env

from specchat.ui.theming import DEFAULT_TOKEN_COLOURS

ACCEPTED = DEFAULT_TOKEN_COLOURS["spec-accepted"]
REJECTED = DEFAULT_TOKEN_COLOURS["spec-rejected"]


def _open(chromium_browser, url: str):
    page = chromium_browser.new_page(viewport=VIEWPORT)
    response = page.goto(url)
    return page, response


def test_the_page_names_itself_and_a_shipped_trace_plays_in_verdict_colours(tmp_path, chromium):
    served = Served(tmp_path, "replay", "code-0.5b-draft-k3", "--speed", "4")
    try:
        with browser(chromium) as b:
            page, response = _open(b, served.url)
            assert response.status == 200
            assert page.title() == "specchat: speculative decoding, live"
            assert "specchat replay code-0.5b-draft-k3" in page.inner_text(".intro-dialog")
            drawn(page)
            accepted = wait_for(
                lambda: colour_pixels(page.screenshot(), ACCEPTED, TRANSCRIPT) > 500,
                "accepted drafts drawn in the accepted colour", timeout=90)
            assert accepted
            assert colour_pixels(page.screenshot(), REJECTED, TRANSCRIPT) > 50
    finally:
        served.stop()


def test_a_message_typed_in_the_browser_gets_a_streamed_reply_on_the_tiny_models(tmp_path, tiny,
                                                                                 chromium):
    served = Served(tmp_path, "--target", str(tiny.target), "--draft", str(tiny.draft),
                    "--max-tokens", "40", "--temperature", "0", "--policy", "fixed")
    try:
        with browser(chromium) as b:
            page, _ = _open(b, served.url)
            drawn(page)
            before = colour_pixels(page.screenshot(), ACCEPTED, TRANSCRIPT)
            history = wait_for(served.histories, "a history file for the tab")[0]
            # typed at once, while the models may still load: the text waits in the box, and
            # Enter sends it once they are loaded (the app says so until then)
            page.keyboard.type("Say something, tiny model.")
            send_typed_message(page, history)
            assert saved_messages(history, "user") == [("Say something, tiny model.", 1)]
            reply = wait_for(lambda: [r for r in saved_replies(history) if r[1]],
                             "a complete reply saved to the tab's history")[0]
            assert reply[0].strip()
            after = wait_for(lambda: colour_pixels(page.screenshot(), ACCEPTED, TRANSCRIPT),
                             "the reply's accepted drafts on screen")
            assert after > before
            with page.expect_download(timeout=30_000) as download:  # F8: the slides, sent here
                page.keyboard.press("F8")
            assert download.value.suggested_filename.startswith("chat-1-say-something-tiny-model-")
            slide = unescape(download.value.path().read_text(encoding="utf-8")).replace("\xa0", " ")
            assert "Say something, tiny model." in slide and ACCEPTED in slide
    finally:
        served.stop()


def test_a_tab_over_the_cap_gets_a_page_saying_the_room_is_full_until_a_seat_frees(tmp_path,
                                                                                   chromium):
    served = Served(tmp_path, "replay", "code-0.5b-draft-k3", max_sessions=1)
    try:
        with browser(chromium) as b:
            first, _ = _open(b, served.url)
            drawn(first)
            second, response = _open(b, served.url)
            assert response.status == 503
            assert "The room is full" in second.inner_text("body")
            assert "All 1 specchat sessions" in second.inner_text("body")
            first.close()
            wait_for(lambda: second.goto(served.url).status == 200, "a seat freed by a closed tab",
                     timeout=30, every=1)
            drawn(second)
    finally:
        served.stop()


def test_serve_stays_on_loopback_unless_exposed_and_says_a_taken_port_in_one_line(tmp_path):
    refused = specchat("serve", "--host", "0.0.0.0", tmp_path=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.startswith("specchat: error: refusing to serve on 0.0.0.0")
    assert "Traceback" not in refused.stderr
    taken = Served(tmp_path, "replay", "--list")
    try:
        again = specchat("serve", "--port", str(taken.port), tmp_path=tmp_path)
        assert again.returncode == 2
        assert again.stderr == f"specchat: error: cannot serve on 127.0.0.1:{taken.port}: " \
                               "Address already in use\n"
    finally:
        taken.stop()
    for flags, says, address in (
            (["--expose"], "lets in only requests with this room's access code",
             r"specchat serve on http://127\.0\.0\.1:0/\?code=\S+ \(attendees: http://\S+/\?code="),
            (["--expose", "--open"], "has no authentication",
             r"specchat serve on http://127\.0\.0\.1:0/ \(attendees: http://\S+/\)")):
        proc = subprocess.Popen([sys.executable, "-m", "specchat", "serve", *flags, "--port", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=specchat_env(tmp_path) | {"TMPDIR": str(tmp_path)})
        try:
            assert proc.stderr is not None and proc.stdout is not None
            assert says in proc.stderr.readline()
            assert re.match(address, proc.stdout.readline())
        finally:
            proc.kill()
            proc.wait()
