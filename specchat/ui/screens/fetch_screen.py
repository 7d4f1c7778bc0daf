"""First run with no models: offer to fetch the default pair, with a progress bar."""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, ProgressBar

from specchat.catalog.catalog import Catalog, CatalogModel, models_dir
from specchat.catalog.fetch import fetch_model
from specchat.errors import SpecchatError


class FetchScreen(ModalScreen[bool]):
    """Dismissed with True once both models are fetched and verified."""

    DEFAULT_CSS = """
    FetchScreen { align: center middle; }
    FetchScreen > Vertical { width: 80; height: auto; border: thick $primary;
                             background: $surface; padding: 1 2; }
    FetchScreen Horizontal { height: auto; margin-top: 1; }
    """

    def __init__(self, reason: str, models: list[CatalogModel] | None = None) -> None:
        super().__init__()
        self.reason = reason
        self.models = models or Catalog.load().pair_models("default")

    def compose(self) -> ComposeResult:
        size = sum(m.size for m in self.models) / 1e9
        with Vertical():
            yield Label(f"[b]No model pair yet.[/b] {self.reason}")
            yield Label(f"Fetch the default pair ({', '.join(m.name for m in self.models)}, "
                        f"{size:.1f} GB) into {models_dir()}?\nOr quit and run "
                        "`specchat --target FILE.gguf --draft FILE.gguf` with your own files.")
            yield Label("", id="stage")
            yield ProgressBar(total=sum(m.size for m in self.models), id="bar")
            with Horizontal():
                yield Button("Fetch the default pair", variant="primary", id="fetch")
                yield Button("Quit", id="quit")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "quit":
            self.app.exit()
        else:
            event.button.disabled = True
            self.fetch()

    @work(thread=True, exclusive=True)
    def fetch(self) -> None:
        done_before = 0
        try:
            for model in self.models:
                def progress(stage: str, done: int, total: int, base: int = done_before,
                             name: str = model.name) -> None:
                    self.app.call_from_thread(self._progress, f"{name}: {stage}", base + done)

                fetch_model(model, models_dir(), progress,
                            note=lambda m: self.app.call_from_thread(self._progress, m, None))
                done_before += model.size
        except SpecchatError as exc:
            self.app.call_from_thread(self._progress, f"[red]{exc}[/red]", None)
            return
        self.app.call_from_thread(self.dismiss, True)

    def _progress(self, stage: str, done: int | None) -> None:
        self.query_one("#stage", Label).update(stage)
        if done is not None:
            self.query_one(ProgressBar).update(progress=done)
