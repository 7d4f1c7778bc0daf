"""Settings: speculation, sampling and display, saved to the config file's [engine] section."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Switch


def policy_name(text: str) -> str:
    if text not in ("fixed", "adaptive"):
        raise ValueError(text)
    return text


@dataclass(frozen=True)
class Field:
    key: str
    label: str
    kind: Callable[[str], Any]
    help: str


FIELDS = [
    Field("policy", "draft policy", policy_name, "fixed or adaptive (chooses up to k a round)"),
    Field("k", "draft length k", int, "tokens drafted per round (adaptive: at most)"),
    Field("n_min", "minimum draft", int, "drop drafts shorter than this"),
    Field("p_min", "confidence stop", float, "stop drafting below this draft probability"),
    Field("temperature", "temperature", float, "0 = greedy"),
    Field("top_k", "top-k", int, "0 = off"),
    Field("top_p", "top-p", float, "1 = off"),
    Field("seed", "seed", int, "empty = random"),
    Field("max_tokens", "max tokens", int, "per reply"),
    Field("target_gpu_layers", "target GPU layers", int, "empty = all where a GPU exists"),
    Field("draft_gpu_layers", "draft GPU layers", int, "empty = all where a GPU exists"),
]


def parse(values: dict[str, str]) -> dict[str, Any]:
    """Typed values from the form; raise ValueError naming the field that does not parse."""
    out: dict[str, Any] = {}
    for f in FIELDS:
        text = values.get(f.key, "").strip()
        if not text:
            continue
        try:
            out[f.key] = f.kind(text)
        except ValueError:
            raise ValueError(f"{f.label}: {text!r} is not valid ({f.help})") from None
    return out


class SettingsScreen(ModalScreen[dict[str, Any] | None]):
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

    def __init__(self, current: dict[str, Any]) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("[b]Settings[/b] (saved to the config file; model settings apply on the "
                        "next start)")
            with Grid():
                for f in FIELDS:
                    value = self.current.get(f.key)
                    yield Label(f.label)
                    yield Input("" if value is None else str(value), id=f.key)
                    yield Label(f"[dim]{f.help}[/dim]")
                yield Label("show rejected")
                yield Switch(bool(self.current.get("show_rejected", True)), id="show_rejected")
                yield Label("")
            yield Label("", id="error")
            yield Button("Save", variant="primary", id="save")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        try:
            values = parse({f.key: self.query_one(f"#{f.key}", Input).value for f in FIELDS})
        except ValueError as exc:
            self.query_one("#error", Label).update(str(exc))
            return
        values["show_rejected"] = self.query_one("#show_rejected", Switch).value
        self.dismiss(values)
