"""Slides from any turn: F8 in the app writes each finished turn as SVG and HTML in the theme on
screen, and the costs screen or a race as an SVG screenshot; `specchat replay --export` writes
a trace's turns and race headless in the projector theme. Files are named after the
conversation and turn, and the app says where they went."""

from __future__ import annotations

import asyncio
import re
from html import unescape

from support.pilot import SIZE, make_app, ready, say, until
from support.processes import specchat

from specchat.engine.events import RoundEvent
from specchat.engine.stats import TurnStats
from specchat.trace import read_trace
from specchat.ui.theming import DEFAULT_TOKEN_COLOURS, load_themes

PROJECTOR = {t.name: t for t in load_themes()}["specchat-projector"].variables


def _html_text(path) -> str:
    return unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))


def test_f8_writes_each_finished_turn_named_after_the_conversation_and_says_where(
        tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = make_app(tiny, tmp_path)

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await pilot.press("f8")
            assert any("no finished turn" in n.message for n in app._notifications)
            await say(app, pilot, "Count to three, please.")
            await say(app, pilot, "And now backwards.")
            await pilot.press("f8")
            await pilot.pause()
            return [n.message for n in app._notifications], app.chat_screen.transcript.slides("x")

    messages, slides = asyncio.run(go())
    out = tmp_path / "specchat-slides"
    names = sorted(p.name for p in out.iterdir())
    assert names == [f"chat-1-count-to-three-please-turn-{n}.{ext}" for n in (1, 2)
                     for ext in ("html", "svg")]
    assert any(m.startswith(f"slides of 2 turns written to {out}: chat-1-count-to-three-please-"
                            "turn-1.svg, ") for m in messages)
    second = _html_text(out / "chat-1-count-to-three-please-turn-2.html")
    assert "> And now backwards." in second
    def printable(text: str) -> str:  # the tiny models write control codes Rich may drop
        return "".join(c for c in text if c.isprintable())

    reply = printable("".join(text for _, text in slides[1].pieces)).strip()
    assert reply and reply[:12] in printable(second)
    assert f"accepted {slides[1].turn.counts.n_accepted}/{slides[1].turn.counts.n_drafted}" in second
    svg = (out / "chat-1-count-to-three-please-turn-1.svg").read_text(encoding="utf-8")
    assert DEFAULT_TOKEN_COLOURS["spec-accepted"] in svg  # the dark theme on screen


def test_f8_on_the_costs_screen_saves_a_screenshot_named_after_the_turn(tiny, tmp_path,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = make_app(tiny, tmp_path)

    async def go():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await say(app, pilot, "Hello there.")
            await pilot.press("f7")
            await until(pilot, lambda: type(app.screen).__name__ == "CostsScreen")
            await pilot.press("f8")
            await pilot.pause()
            return [n.message for n in app._notifications]

    messages = asyncio.run(go())
    shot = tmp_path / "specchat-slides" / "chat-1-hello-there-turn-1-costs.svg"
    assert f"a screenshot written to {shot.parent}: {shot.name}" in messages
    assert "<svg" in shot.read_text(encoding="utf-8")[:200]


def test_replay_export_writes_turns_and_the_race_headless_in_the_projector_theme(tmp_path):
    out = tmp_path / "slides"
    proc = specchat("replay", "code-0.5b-draft-k3", "code-target-only", "--export", "svg,html",
                    "--out", str(out), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "code-0.5b-draft-k3-turn-1.html", "code-0.5b-draft-k3-turn-1.svg",
        "code-target-only-turn-1.html", "code-target-only-turn-1.svg",
        "race-code-0.5b-draft-k3-vs-code-target-only.svg"]
    assert proc.stdout.startswith(f"wrote 5 files to {out}: ")
    svg = (out / "code-0.5b-draft-k3-turn-1.svg").read_text(encoding="utf-8")
    assert PROJECTOR["spec-accepted"] in svg and PROJECTOR["spec-rejected"] in svg
    assert DEFAULT_TOKEN_COLOURS["spec-accepted"] not in svg
    assert "accepted 73/84 (87%)" in _html_text(out / "code-0.5b-draft-k3-turn-1.html")
    race = _html_text(out / "race-code-0.5b-draft-k3-vs-code-target-only.svg")
    ends = []  # when each lane's last token appeared, from the recorded rounds
    for name in ("code-target-only", "code-0.5b-draft-k3"):
        stats = TurnStats()
        for event in read_trace(name).events:
            if isinstance(event, RoundEvent):
                stats.add_round(event)
        ends.append(stats.t_last)
    assert ends[0] < ends[1]
    assert (f"target only finished first: {ends[0]:.2f} s against {ends[1]:.2f} s"
            in race.replace("\xa0", " "))
    assert "playback 1x" in race.replace("\xa0", " ")
    only_html = specchat("replay", "code-target-only", "--export", "html", "--out",
                         str(tmp_path / "h"), tmp_path=tmp_path)
    assert only_html.returncode == 0, only_html.stderr
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == ["code-target-only-turn-1.html"]
    bad = specchat("replay", "code-target-only", "--export", "pdf", tmp_path=tmp_path)
    assert bad.returncode == 2 and "'pdf': svg, html or svg,html" in bad.stderr
