"""The lesson screen: one step at a time, its demonstration run in a thread worker (on the
model thread where models are loaded here) and drawn when ready; next, back, run again, and in
a room, follow the presenter's step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Static

from specchat.costs import Costs
from specchat.errors import SpecchatError
from specchat.lesson.demos import Demo, run_demo
from specchat.lesson.exercises import (
    EXERCISES,
    Exercise,
    RoomRun,
    RunSettings,
    exercise_demo,
    room_costs,
    run_of,
)
from specchat.lesson.follow import LessonSync
from specchat.lesson.recordings import Recordings
from specchat.lesson.room_board import RoomBoard
from specchat.lesson.script import Lesson
from specchat.lesson.view import stem, step_view
from specchat.native import model_thread
from specchat.ui.slides import token_styles, write_renderable

FOLLOW_EVERY_S = 0.5
"""How often a following tab reads the presenter's step."""
ROOM_EVERY_S = 1.0
"""How often the presenter's tab reads the room's runs while an exercise step is shown."""
TYPED_OVER = {"go", "again", "notes", "follow", "take_lead", "exercise"}
"""The lesson's letter and Space keys, which type into the exercise line while it has focus."""


@dataclass(frozen=True)
class Source:
    """What the demonstrations run on, as the chat screen knows it now: recordings, whether
    they pass on the model thread, or why there are none yet."""

    recordings: Recordings | None
    on_model_thread: bool = False
    waiting: str = ""


class DemoReady(Message):
    def __init__(self, index: int, demo: Demo | None, error: str = "") -> None:
        super().__init__()
        self.index, self.demo, self.error = index, demo, error


class ExerciseLine(Input):
    """Where an exercise's settings and prompt are typed; Escape gives the keys back to the
    lesson."""

    BINDINGS = [Binding("escape", "leave", "Lesson keys")]

    def action_leave(self) -> None:
        self.screen.set_focus(None)


class ExerciseDone(Message):
    def __init__(self, run: RoomRun | None, note: str) -> None:
        super().__init__()
        self.run, self.note = run, note


class RoomRuns(Message):
    def __init__(self, runs: list[RoomRun] | None, costs: tuple[Costs, str] | None) -> None:
        super().__init__()
        self.runs, self.costs = runs, costs


class LessonScreen(Screen):
    BINDINGS = [
        Binding("right,n,space", "go(1)", "Next", priority=True),
        Binding("left,b,p", "go(-1)", "Back", priority=True),
        Binding("r", "again", "Run again"),
        Binding("a", "notes", "Answer & notes"),
        Binding("f", "follow", "Follow presenter", show=False),
        Binding("t", "take_lead", "Take the lead", show=False),
        Binding("e", "exercise", "Your run", show=False),
        Binding("escape", "app.pop_screen", "Back to chat"),
    ]

    def __init__(self, lesson: Lesson, source: Callable[[], Source], sync: LessonSync | None = None,
                 start: int = 0) -> None:
        super().__init__()
        self.lesson, self.source, self.sync = lesson, source, sync
        self.index = min(max(start, 0), len(lesson.steps) - 1)
        self.demos: dict[int, Demo] = {}
        self.note = ""
        self.following = sync is not None and not sync.leads()
        """An attendee's tab (or a presenter's tab another one leads) goes where the leading
        presenter goes until it steps away."""
        self.notes_shown = False
        """The presenter's answer and notes under the step (never on an attendee's tab)."""
        self.led_at: int | None = None
        """The step this tab last led the room to (a presenter's tab that led)."""
        self.board = RoomBoard.from_env()
        """The room's board of exercise runs, in a room's tab."""
        self.my_runs: list[RoomRun] = []
        self.room_runs: list[RoomRun] | None = None
        """What the class plot draws: the room's runs (the presenter's tab), this tab's own
        (a lesson alone), None on an attendee's tab."""
        self.room_costs: tuple[Costs, str] | None = None
        self.reading_room = False
        self.exercise_note = ""

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll():
            yield Static(id="lesson-step")
        yield ExerciseLine(id="exercise-input", select_on_focus=False,
                           placeholder="settings, then your prompt (Enter races it; Escape: the "
                                       "lesson's keys)")
        yield Footer()

    def on_mount(self) -> None:
        if self.sync is not None:
            self.set_interval(FOLLOW_EVERY_S, self.follow_presenter)
            self.follow_presenter()
        if not self.attendee:
            self.room_runs = self.my_runs if self.board is None else []
            self.set_interval(ROOM_EVERY_S, self.read_room)
        self.show(self.index)

    @property
    def exercise(self) -> Exercise | None:
        name = self.lesson.steps[self.index].exercise
        return EXERCISES[name] if name else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """While the exercise line has the keys, letters and Space type into it."""
        if isinstance(self.focused, Input) and action in TYPED_OVER:
            return False
        return True

    # -- the step on screen -------------------------------------------------------------------
    def show(self, index: int) -> None:
        self.index = index
        if self.sync is not None and self.sync.publish(index):  # only where this tab leads
            self.led_at = index
        self.sub_title = self.where()
        self.draw()
        if self.exercise is None and index not in self.demos:
            self.run_step(index)

    def shown_demo(self) -> Demo | None:
        """What the step on screen shows: its exercise with the runs so far, or its
        demonstration once made."""
        exercise = self.exercise
        if exercise is None:
            return self.demos.get(self.index)
        return exercise_demo(exercise, self.my_runs, self.room_runs, self.room_costs,
                             self.exercise_note)

    def draw(self) -> None:
        exercise = self.exercise
        view = step_view(self.lesson, self.index, self.shown_demo(), self.note,
                         presenter=self.notes_shown)
        self.query_one("#lesson-step", Static).update(view)
        line = self.query_one("#exercise-input", Input)
        line.display = exercise is not None
        if exercise is not None and not line.value:
            line.value = exercise.settings + " "
            line.cursor_position = len(line.value)
        if exercise is not None and self.attendee and self.following:
            line.focus()  # an attendee following needs no lesson keys: the line has them

    @property
    def attendee(self) -> bool:
        return self.sync is not None and not self.sync.presenter

    def where(self, presenter: int | None = None) -> str:
        """The subtitle; `presenter`: the presenter's step as last read."""
        if self.sync is None:
            return ""
        if self.sync.leads():
            return "presenting: every tab in the room follows this one"
        lead = " (another presenter's tab leads: t takes the lead)" if self.sync.presenter else ""
        if self.following:
            return "following the presenter" + lead
        at = "" if presenter is None else f" (on step {presenter + 1})"
        return f"on your own: f goes back to the presenter's step{at}{lead}"

    def run_step(self, index: int) -> None:
        source = self.source()
        if source.recordings is None:
            self.note = source.waiting
            self.draw()
            self.set_timer(1.0, lambda: self.retry(index))
            return
        self.note = f"running the demonstration on {source.recordings.where}…"
        self.draw()
        self.demonstrate(index, source)

    def retry(self, index: int) -> None:
        """Ask the source again while the step is still on screen and has no demonstration."""
        if self.index == index and index not in self.demos:
            self.run_step(index)

    @work(thread=True, exclusive=True, group="lesson")
    def demonstrate(self, index: int, source: Source) -> None:
        assert source.recordings is not None
        recordings = source.recordings
        styles = token_styles(self.app.current_theme)
        name = self.lesson.steps[index].demo

        def make() -> Demo:
            return run_demo(name, recordings, styles)
        try:
            demo = model_thread.call(make) if source.on_model_thread else make()
        except SpecchatError as exc:
            self.post_message(DemoReady(index, None, str(exc)))
            return
        self.post_message(DemoReady(index, demo))

    # -- exercises ----------------------------------------------------------------------------
    def action_exercise(self) -> None:
        """The keys to the exercise line, on an exercise step."""
        if self.exercise is not None:
            self.query_one("#exercise-input", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        exercise, source = self.exercise, self.source()
        if exercise is None:
            return
        try:
            settings, prompt = RunSettings.parse(event.value)
        except SpecchatError as exc:
            self.exercise_note = str(exc)
        else:
            if source.recordings is None:
                self.exercise_note = source.waiting
            else:
                self.exercise_note = "racing: the target alone, then your settings…"
                self.race(source, settings, prompt)
        self.draw()

    @work(thread=True, exclusive=True, group="exercise")
    def race(self, source: Source, settings: RunSettings, prompt: str) -> None:
        """An attendee's run: raced here, its numbers posted to the room's board."""
        assert source.recordings is not None
        recordings = source.recordings

        def make() -> RoomRun:
            return run_of(recordings.exercise(prompt, settings), settings)
        try:
            run = model_thread.call(make) if source.on_model_thread else make()
        except SpecchatError as exc:
            self.post_message(ExerciseDone(None, str(exc)))
            return
        note = "your run is on your plot (no room to post to)"
        if self.board is not None:
            try:
                run = self.board.post(run)
                note = f"posted to the room as tab {run.tab}'s"
            except SpecchatError as exc:
                note = str(exc)
        self.post_message(ExerciseDone(run, note))

    def on_exercise_done(self, message: ExerciseDone) -> None:
        if message.run is not None:  # a lesson alone numbers its own runs
            self.my_runs.append(message.run if self.board is not None else
                                replace(message.run, tab=len(self.my_runs) + 1))
        self.exercise_note = message.note
        if self.exercise is not None:
            self.draw()

    def read_room(self) -> None:
        """The presenter's (or a lone lesson's) class plot, while an exercise step is shown;
        one read at a time (timing the costs takes a race)."""
        if self.exercise is not None and not self.reading_room:
            self.reading_room = True
            self.fetch_room(self.source())

    @work(thread=True, exclusive=True, group="room")
    def fetch_room(self, source: Source) -> None:
        """The room's runs, and the curve's costs until they are had: posted whatever
        happens, so the next read can start."""
        runs: list[RoomRun] | None = None
        costs = self.room_costs
        try:
            if self.board is not None:
                runs = self.board.runs()
            if costs is None and source.recordings is not None:
                recordings = source.recordings
                costs = (model_thread.call(lambda: room_costs(recordings))
                         if source.on_model_thread else room_costs(recordings))
        except SpecchatError:
            pass  # the room's server not answering: the plot keeps what it had
        finally:
            self.post_message(RoomRuns(runs, costs))

    def on_room_runs(self, message: RoomRuns) -> None:
        self.reading_room = False
        if message.runs is not None:
            self.room_runs = message.runs
        self.room_costs = message.costs or self.room_costs
        if self.exercise is not None:
            self.draw()

    def on_demo_ready(self, message: DemoReady) -> None:
        if message.demo is not None:
            self.demos[message.index] = message.demo
        elif message.index == self.index:
            self.note = f"the demonstration failed: {message.error} (r runs it again)"
        if message.index == self.index:
            self.draw()

    # -- keys ---------------------------------------------------------------------------------
    def action_go(self, delta: int) -> None:
        target = self.index + delta
        if 0 <= target < len(self.lesson.steps):
            self.following = False
            self.show(target)

    def action_again(self) -> None:
        """Make this step's recordings again (live sources generate anew), and drop every
        step shown from one of them, so steps that show the same round keep showing one."""
        source = self.source()
        shown = self.demos.pop(self.index, None)
        if source.recordings is not None and shown is not None:
            source.recordings.forget(shown.uses)
            for index, demo in list(self.demos.items()):
                if demo.uses & shown.uses:
                    del self.demos[index]
        self.show(self.index)

    def action_notes(self) -> None:
        """Show or hide the answer and the notes: the presenter's (or a lone user's) alone."""
        if self.attendee:
            self.notify("the answer and the notes are the presenter's", severity="warning")
            return
        self.notes_shown = not self.notes_shown
        self.draw()

    def action_follow(self) -> None:
        if self.sync is not None and not self.sync.leads():
            self.following = True
            self.follow_presenter()

    def action_take_lead(self) -> None:
        """A presenter's tab another one leads takes the lead; that one then follows."""
        if self.sync is not None and self.sync.presenter and self.sync.publish(
                self.index, take_lead=True):
            self.following = False
            self.led_at = self.index
            self.sub_title = self.where()

    def follow_presenter(self) -> None:
        assert self.sync is not None
        if self.sync.leads():
            self.following = False
            self.sub_title = self.where()
            return
        presenter = self.sync.read()
        if self.sync.presenter and not self.following and presenter is not None \
                and self.index == self.led_at:  # it led, and another tab took the lead
            self.following, self.led_at = True, None
        if self.following and presenter is not None and presenter != self.index \
                and presenter < len(self.lesson.steps):
            self.show(presenter)
        else:
            self.sub_title = self.where(presenter)

    def write_slide(self, out: Path) -> list[Path]:
        """F8: this step as an SVG and an HTML slide."""
        view = step_view(self.lesson, self.index, self.shown_demo(), self.note)
        return write_renderable(view, self.app.current_theme, out, stem(self.lesson, self.index),
                                f"specchat · {self.lesson.steps[self.index].title}")
