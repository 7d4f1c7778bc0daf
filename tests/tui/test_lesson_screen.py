"""The lesson in the app: keys move through the steps, F8 writes the step on screen, Esc goes
back to the chat and F9 returns; in a room an attendee's tab follows the presenter's step until
it steps away, and f brings it back; the demonstrations run live on the tiny pair."""

from __future__ import annotations

import json
import re
import subprocess
from html import unescape
from pathlib import Path

from support.pilot import SIZE, make_app, run_async, until

from specchat.lesson.demos import DEMOS
from specchat.lesson.follow import PRESENTER, ROLE_ENV, SYNC_ENV, LessonSync
from specchat.lesson.script import load_lesson
from specchat.ui.launch import Launch, LessonLaunch
from specchat.ui.screens.lesson_screen import LessonScreen


def _lesson_app(tiny, tmp_path: Path, traces_only: bool = True):
    """The app started as `specchat lesson [--traces] --tokens 16` starts it, on the tiny pair."""
    return make_app(tiny, tmp_path, launch=Launch(warm_up=False, lesson=LessonLaunch(
        load_lesson(None, frozenset(DEMOS)), traces_only, tokens=16)))


def _shown(app) -> str:
    """The text on the screen, as its SVG screenshot draws it."""
    assert isinstance(app.screen, LessonScreen)
    svg = app.export_screenshot()
    return unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")


async def _at_step(app, pilot, n: int) -> None:
    await until(pilot, lambda: isinstance(app.screen, LessonScreen) and app.screen.index == n - 1
                and ((n - 1) in app.screen.demos or app.screen.exercise is not None))


def test_keys_step_through_the_lesson_and_f8_writes_the_step_on_screen(tiny, tmp_path):
    async def scenario():
        app = _lesson_app(tiny, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await _at_step(app, pilot, 1)
            await until(pilot, lambda: "One token at a time" in _shown(app)
                        and "shipped traces" in _shown(app))  # drawn, not only made
            await pilot.press("right", "space")
            await _at_step(app, pilot, 3)
            await until(pilot, lambda: "The KV cache: what each model keeps" in _shown(app))
            await pilot.press("left")
            await _at_step(app, pilot, 2)
            app.action_slides(out=tmp_path / "slides")
            assert [p.name for p in sorted((tmp_path / "slides").iterdir())] == [
                "lesson-02-a-draft-proposes.html", "lesson-02-a-draft-proposes.svg"]
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is app.chat_screen)
            await pilot.press("f9")
            await _at_step(app, pilot, 1)
    run_async(scenario)


def test_an_attendee_follows_the_presenter_until_it_steps_away_and_f_brings_it_back(
        tiny, tmp_path, monkeypatch):
    sync = tmp_path / "lesson-step.json"
    monkeypatch.setenv(SYNC_ENV, str(sync))
    monkeypatch.delenv(ROLE_ENV, raising=False)
    presenter = LessonSync(sync, presenter=True)

    async def scenario():
        app = _lesson_app(tiny, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await _at_step(app, pilot, 1)
            presenter.publish(4)
            await _at_step(app, pilot, 5)
            assert app.screen.sub_title == "following the presenter"
            await pilot.press("left")  # steps away
            await _at_step(app, pilot, 4)
            assert presenter.read() == 4  # an attendee never writes the presenter's step
            presenter.publish(7)
            await pilot.pause(1.5)
            assert app.screen.index == 3 and "f goes back" in app.screen.sub_title
            await pilot.press("f")
            await _at_step(app, pilot, 8)
    run_async(scenario)


def test_the_presenter_tab_writes_its_step_for_the_room(tiny, tmp_path, monkeypatch):
    sync = tmp_path / "lesson-step.json"
    monkeypatch.setenv(SYNC_ENV, str(sync))
    monkeypatch.setenv(ROLE_ENV, PRESENTER)

    async def scenario():
        app = _lesson_app(tiny, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await _at_step(app, pilot, 1)
            assert LessonSync(sync, False).read() == 0
            await pilot.press("right", "right")
            await until(pilot, lambda: LessonSync(sync, False).read() == 2)
    run_async(scenario)


def test_the_demonstrations_run_live_on_the_loaded_pair(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "models"))  # no SmolLM2 here

    async def scenario():
        app = _lesson_app(tiny, tmp_path, traces_only=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: isinstance(app.screen, LessonScreen))
            for n, step in enumerate(app.screen.lesson.steps, 1):
                await _at_step(app, pilot, n)
                if step.exercise:
                    await pilot.press("right")
                    continue
                await until(pilot, lambda n=n: (n - 1) in app.screen.demos, timeout=120)
                sources = app.screen.demos[n - 1].sources
                assert sources and all("failed" not in s for s in sources)
                if step.demo == "draft_choice":  # the other draft is not installed: it says so
                    assert any("is not installed here" in s for s in sources)
                elif n == 1:
                    assert sources[0].startswith("generated here now: tiny-target")
                await pilot.press("right")
    run_async(scenario)


def test_the_first_run_layout_offer_does_not_cover_a_lesson(tiny, tmp_path, monkeypatch):
    from specchat.catalog.layout import Q4_0
    from specchat.optimize.command import Job
    from specchat.ui.screens.layout_offer import LayoutOfferScreen, Offer

    offer = Offer(Q4_0, "x86 with AVX2", [Job(tiny.draft, "tiny-draft", "draft")])
    monkeypatch.setattr("specchat.ui.chat.model_loading.layout_offer", lambda settings: offer)

    async def scenario():
        app = _lesson_app(tiny, tmp_path, traces_only=False)
        async with app.run_test(size=SIZE) as pilot:
            await _at_step(app, pilot, 1)  # its demonstration ran on the loaded models
            await app.workers.wait_for_complete()
            await pilot.pause()
            assert isinstance(app.screen, LessonScreen)
            assert not any(isinstance(s, LayoutOfferScreen) for s in app.screen_stack)
    run_async(scenario)


def test_the_answer_and_notes_are_the_presenters_and_never_an_attendees(tiny, tmp_path,
                                                                        monkeypatch):
    async def scenario(role: str | None) -> str:
        monkeypatch.setenv(SYNC_ENV, str(tmp_path / f"{role}-step.json"))
        if role:
            monkeypatch.setenv(ROLE_ENV, role)
        else:
            monkeypatch.delenv(ROLE_ENV, raising=False)
        app = _lesson_app(tiny, tmp_path)
        async with app.run_test(size=SIZE) as pilot:
            await _at_step(app, pilot, 1)
            assert "answer:" not in _shown(app)
            await pilot.press("a")
            await pilot.pause(0.2)
            return _shown(app)
    presenter = run_async(lambda: scenario(PRESENTER))
    assert "for the presenter only" in presenter and "answer: Less than two steps" in presenter
    total = sum(step.minutes for step in load_lesson(None, frozenset(DEMOS)).steps)
    assert f"time: 3 min (from minute 0 of {total:g})" in presenter
    assert "answer:" not in run_async(lambda: scenario(None))


def test_a_second_presenter_tab_follows_until_it_takes_the_lead(tiny, tmp_path, monkeypatch):
    """The first presenter's tab is another live process here (its id in the file)."""
    sync = tmp_path / "lesson-step.json"
    first = subprocess.Popen(["sleep", "60"])
    try:
        sync.write_text(json.dumps({"step": 2, "leader": first.pid}), encoding="utf-8")
        monkeypatch.setenv(SYNC_ENV, str(sync))
        monkeypatch.setenv(ROLE_ENV, PRESENTER)

        async def scenario():
            app = _lesson_app(tiny, tmp_path)
            async with app.run_test(size=SIZE) as pilot:
                await _at_step(app, pilot, 3)  # it follows the leading tab to its step
                assert "another presenter's tab leads: t takes the lead" in app.screen.sub_title
                await pilot.press("right")
                await _at_step(app, pilot, 4)
                assert LessonSync(sync, False).read() == 2  # a follower does not lead
                await pilot.press("t")
                await until(pilot, lambda: LessonSync(sync, False).read() == 3)
                assert app.screen.sub_title.startswith("presenting")
                sync.write_text(json.dumps({"step": 6, "leader": first.pid}), encoding="utf-8")
                await _at_step(app, pilot, 7)  # the first took the lead back: this one follows
        run_async(scenario)
    finally:
        first.kill()
        first.wait()
    assert LessonSync(sync, presenter=True).leads()  # the leader's process has ended


def test_an_exercise_races_what_was_typed_and_draws_it_on_the_class_plot(tiny, tmp_path):
    """A lesson alone: the run is this tab's own, on its own plot; a bad line is refused in
    one line and runs nothing."""
    async def scenario():
        app = _lesson_app(tiny, tmp_path, traces_only=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: isinstance(app.screen, LessonScreen))
            lesson = app.screen.lesson
            step = next(i for i, s in enumerate(lesson.steps) if s.exercise == "sweep_k")
            for _ in range(step):
                await pilot.press("right")
            await until(pilot, lambda: app.screen.index == step)
            line = app.screen.query_one("#exercise-input")
            assert line.display and line.value.startswith("--k 4")
            line.focus()
            line.value = "--k 9 a prompt"
            await pilot.press("enter")
            await until(pilot, lambda: "--k 9: from 1 to 8" in _shown(app))
            assert app.screen.index == step and not app.screen.my_runs
            line.value = "--k 2 --kind code Write a Python function that adds two numbers."
            line.cursor_position = len(line.value)
            await pilot.press("space", "n", "b")  # typed, not the lesson's keys
            assert app.screen.index == step and line.value.endswith(" nb")
            line.value = line.value[:-3]
            await pilot.press("enter")
            await until(pilot, lambda: len(app.screen.my_runs) == 1, timeout=120)
            run = app.screen.my_runs[0]
            assert (run.k, run.kind, run.draft, run.tab) == (2, "code", "model", 1)
            await until(pilot, lambda: app.screen.room_costs is not None, timeout=120)
            shown = _shown(app)
            assert "your runs" in shown and f"{run.speedup:.2f}x" in shown
            assert "the curve: a model draft's speedup at k=3" in shown
            grid = [line.split("|", 1)[1] for line in shown.splitlines() if "x|" in line
                    or line.strip() == "|" or line.lstrip().startswith("|")]
            assert sum(row.count(str(run.tab)) for row in grid) == 1  # its mark, once
    run_async(scenario)
