"""Race mode: target-only and speculative decoding of one prompt, side by side on one clock.

Running both at once on a small machine would slow both, so each lane is generated alone, one
after the other, and recorded; the screen then plays both recordings back from the same start
at their recorded pace (each round appears when its `t_s` comes). The screen says so.
"""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from specchat.engine.events import RoundEvent, TokenEvent, TurnEvent
from specchat.engine.stats import TurnStats
from specchat.trace import Lane
from specchat.ui.widgets.legend import Legend
from specchat.ui.widgets.live_reply import LiveReply

HOW = ("Each side was generated alone, one after the other, on this machine; both are played "
       "back here from the same start at their recorded pace, so the clocks compare fairly.")
TICK_S = 0.05


class LanePanel(Vertical):
    DEFAULT_CSS = """
    LanePanel { width: 1fr; border: round $panel; padding: 0 1; }
    LanePanel > .title { text-style: bold; }
    LanePanel > .clock { height: 2; color: $text-muted; }
    LanePanel > VerticalScroll { height: 1fr; }
    """

    def __init__(self, lane: Lane) -> None:
        super().__init__()
        self.lane = lane
        self.pending = lane.rounds()
        self.stats = TurnStats()
        self.reply = LiveReply()
        self.done_at: float | None = None

    def compose(self) -> ComposeResult:
        yield Static(self.lane.label, classes="title")
        yield Static("", classes="clock")
        with VerticalScroll():
            yield self.reply

    def advance(self, now: float) -> None:
        """Show every round due by `now` (seconds on the common clock)."""
        shown = False
        while self.pending and self.pending[0][0] <= now:
            _, events = self.pending.pop(0)
            self.reply.add_tokens([e for e in events if isinstance(e, TokenEvent)])
            for e in events:
                if isinstance(e, RoundEvent):
                    self.stats.add_round(e)
                elif isinstance(e, TurnEvent):
                    self.done_at = self.stats.t_last
            shown = True
        if shown:
            self.reply.refresh_content()
        clock = self.done_at if self.done_at is not None else now
        rate = self.stats.tokens_per_second
        state = "finished" if self.done_at is not None else "running"
        self.query_one(".clock", Static).update(
            f"{clock:6.2f} s · {self.stats.tokens} tokens · "
            f"{'–' if rate is None else f'{rate:.1f}'} tok/s decode · {state}")


class RaceScreen(Screen):
    """Two lanes on one clock; Esc closes, R runs the race again, +/- change the speed."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Close"), Binding("r", "restart", "Again"),
                Binding("plus", "faster", "Faster"), Binding("minus", "slower", "Slower")]
    DEFAULT_CSS = """
    RaceScreen #lanes { height: 1fr; }
    RaceScreen #how { color: $text-muted; padding: 0 1; }
    RaceScreen #verdict { text-style: bold; padding: 0 1; height: 2; }
    """

    def __init__(self, lanes: list[Lane], speed: float = 1.0) -> None:
        super().__init__()
        self.lanes, self.speed = lanes, speed
        self.started = 0.0
        self.played = 0.0
        """Common-clock seconds already played before the last speed change."""

    def compose(self) -> ComposeResult:
        yield Static(HOW, id="how")
        with Horizontal(id="lanes"):
            for lane in self.lanes:
                yield LanePanel(lane)
        yield Static("", id="verdict")
        yield Legend()
        yield Footer()

    def on_mount(self) -> None:
        self.started = time.monotonic()
        self.set_interval(TICK_S, self.tick)
        self.tick()

    @property
    def now(self) -> float:
        return self.played + (time.monotonic() - self.started) * self.speed

    def tick(self) -> None:
        now = self.now
        panels = list(self.query(LanePanel))
        for panel in panels:
            panel.advance(now)
        done = sorted((p.done_at, i) for i, p in enumerate(panels) if p.done_at is not None)
        if len(done) == len(panels) and panels:
            (first, i), (last, _) = done[0], done[-1]
            if len(done) > 1 and first:
                text = (f"{panels[i].lane.label} finished first: {first:.2f} s against "
                        f"{last:.2f} s (the other took {last / first:.2f}x as long)")
            else:
                text = f"finished in {first:.2f} s"
            self.query_one("#verdict", Static).update(
                text + f" · playback {self.speed:g}x · F7 on the chat screen shows why")

    def action_restart(self) -> None:
        self.app.pop_screen()
        self.app.push_screen(RaceScreen(self.lanes, self.speed))

    def _set_speed(self, speed: float) -> None:
        self.played, self.started, self.speed = self.now, time.monotonic(), speed

    def action_faster(self) -> None:
        self._set_speed(self.speed * 2)

    def action_slower(self) -> None:
        self._set_speed(self.speed / 2)
