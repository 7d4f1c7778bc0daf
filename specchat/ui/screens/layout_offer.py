"""The first run on a CPU: offer to re-lay the default pair for this CPU's kernels
(`specchat models optimize default`), with a progress bar, once.

Offered where the default pair runs here on a CPU whose llama.cpp has repacked kernels for a
layout the pair is not in yet, and the user has not said no for good (`[models] optimize_offer =
"never"` in the config file).
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import events, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, ProgressBar

from specchat.bench.runner import load_prompts
from specchat.catalog.catalog import Catalog, models_dir
from specchat.catalog.layout import QUALITY_TOKENS, Layout, choose_layout
from specchat.config import Config
from specchat.errors import SpecchatError
from specchat.optimize.command import Job, already_made, jobs, make
from specchat.settings import Settings
from specchat.ui.widgets.prompt_input import PromptInput

NEVER = "never"


@dataclass(frozen=True)
class Offer:
    layout: Layout
    why: str
    todo: list[Job]
    """The default pair's models not yet in the layout, the draft first."""


def layout_offer(settings: Settings) -> Offer | None:
    """What to offer, or None: not the default pair, on a GPU or a llama-server, already made,
    or declined for good. Reads headers and the build's features only (no weights)."""
    models = settings.models
    if models.server or models.backend != "llamacpp" or models.target != "default" or (
            models.rpc or models.draft_rpc):
        return None
    if Config.load().section("models").get("optimize_offer") == NEVER:
        return None
    from specchat.backends.llamacpp import system_info

    layout, why = choose_layout(*system_info())
    if layout is None:
        return None
    try:
        todo = [job for job in jobs("default", Catalog.load())
                if already_made(job, layout, models_dir()) is None]
    except SpecchatError:
        return None
    return Offer(layout, why, todo) if todo else None


class LayoutOfferScreen(ModalScreen[bool]):
    """Dismissed with True once the pair is re-laid (the chat then loads it), False if not.

    It comes up once the message box is ready, so a message may be on its way: what is typed or
    pasted while it shows goes to the message box, and an Enter after it answers "Not now" and
    sends the message (while the copies are being made, the message waits in the box)."""

    AUTO_FOCUS = "#later"
    """An Enter typed with nothing before it answers "Not now"."""

    DEFAULT_CSS = """
    LayoutOfferScreen { align: center middle; }
    LayoutOfferScreen > Vertical { width: 84; height: auto; border: thick $primary;
                                   background: $surface; padding: 1 2; }
    LayoutOfferScreen Label { width: 1fr; }
    LayoutOfferScreen Horizontal { height: auto; margin-top: 1; }
    """

    def __init__(self, offer: Offer) -> None:
        super().__init__()
        self.offer = offer
        self.typed = False
        """Characters went to the message box while the offer showed."""

    def _message_box(self) -> PromptInput | None:
        """The message box on the screen below, where typing goes."""
        for screen in reversed(self.app.screen_stack[:-1]):
            found = screen.query(PromptInput)
            if found:
                return found.first()
        return None

    def on_key(self, event: events.Key) -> None:
        box = self._message_box()
        if box is None:
            return
        if event.is_printable and event.character and (self.typed or event.character != " "):
            event.stop()
            event.prevent_default()
            box.insert(event.character)
            self.typed = True
        elif event.key == "enter" and self.typed:
            event.stop()
            event.prevent_default()
            if self.query_one(Horizontal).display:  # the choice is still open: "Not now"
                self.dismiss(False)
                box.action_submit()
            else:
                self.notify("your message waits in the message box until the copies are made")

    def on_paste(self, event: events.Paste) -> None:
        box = self._message_box()
        if box is not None:
            event.stop()
            box.insert(event.text)
            self.typed = True

    def compose(self) -> ComposeResult:
        names = ", ".join(job.name for job in self.offer.todo)
        with Vertical():
            yield Label(f"[b]Make speculation pay on this CPU?[/b] {self.offer.why}.")
            yield Label(
                f"specchat can write {self.offer.layout.name} copies of {names} beside the "
                "originals (a few minutes; it times both and compares the target's replies). "
                "The draft's layout changes only speed; the target's adds a second rounding, "
                "measured and shown in the target menu (Ctrl+T). The same as `specchat models "
                "optimize default`.")
            yield Label("", id="stage")
            yield ProgressBar(total=None, id="bar")
            with Horizontal():
                yield Button("Make them", variant="primary", id="make")
                yield Button("Not now", id="later")
                yield Button("Never ask", id="never")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        match event.button.id:
            case "make":  # no choice is left to make while it works
                self.query_one(Horizontal).display = False
                self.make_all()
            case "never":
                config = Config.load()
                config.data.setdefault("models", {})["optimize_offer"] = NEVER
                try:
                    config.save()
                except SpecchatError as exc:
                    self.notify(str(exc), severity="error")
                self.dismiss(False)
            case _:
                self.dismiss(False)

    @work(thread=True, exclusive=True)
    def make_all(self) -> None:
        from specchat.settings import ModelOptions

        prompts = load_prompts()
        try:
            for job in self.offer.todo:
                make(job, self.offer.layout, models_dir(), ModelOptions(), prompts, QUALITY_TOKENS,
                     lambda text, done, total: self.app.call_from_thread(
                         self._progress, text, done, total))
        except SpecchatError as exc:
            self.app.call_from_thread(self._progress, f"[red]{exc}[/red]", 0, None)
            self.app.call_from_thread(self._failed)
            return
        self.app.call_from_thread(self.dismiss, True)

    def _progress(self, stage: str, done: int, total: int | None) -> None:
        self.query_one("#stage", Label).update(stage)
        self.query_one(ProgressBar).update(total=total, progress=done)

    def _failed(self) -> None:
        self.query_one(Horizontal).display = True
        self.query_one("#make", Button).disabled = True
