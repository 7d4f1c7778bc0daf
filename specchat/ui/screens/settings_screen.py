"""Settings: speculation, sampling and GPU layers, made from the one settings schema
(specchat/settings.py) and saved to the config file's [engine] section. An empty field means
the field's default, so a seed or a GPU-layer count can be cleared again."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Switch

from specchat.settings import Settings, form_fields, from_form


@dataclass(frozen=True)
class FormValues:
    settings: Settings
    show_rejected: bool


class SettingsScreen(ModalScreen[FormValues | None]):
    """Dismissed with the new settings (typed), or None when cancelled."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Cancel")]
    DEFAULT_CSS = """
    SettingsScreen { align: center middle; }
    SettingsScreen > Vertical { width: 84; height: auto; border: thick $primary;
                                background: $surface; padding: 1 2; }
    SettingsScreen Grid { grid-size: 3; grid-columns: 22 16 1fr; height: auto; grid-gutter: 0 1; }
    SettingsScreen Label { padding: 1 0 0 0; }
    SettingsScreen #error { color: $error; }
    """

    def __init__(self, current: Settings, show_rejected: bool) -> None:
        super().__init__()
        self.current, self.show_rejected = current, show_rejected

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("[b]Settings[/b] (saved to the config file; model settings apply on the "
                        "next start)")
            with Grid():
                for section, f in form_fields():
                    value = getattr(getattr(self.current, section), f.name)
                    yield Label(f.metadata["label"])
                    yield Input("" if value is None else str(value), id=f.name)
                    yield Label(f"[dim]{f.metadata['hint'] or f.metadata['help']}[/dim]")
                yield Label("show rejected")
                yield Switch(self.show_rejected, id="show_rejected")
                yield Label("")
            yield Label("", id="error")
            yield Button("Save", variant="primary", id="save")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        values = {f.name: self.query_one(f"#{f.name}", Input).value for _, f in form_fields()}
        try:
            settings = from_form(self.current, values)
        except ValueError as exc:
            self.query_one("#error", Label).update(str(exc))
            return
        self.dismiss(FormValues(settings, self.query_one("#show_rejected", Switch).value))
