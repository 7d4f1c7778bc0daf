"""Model menus: drafters for the current target (incompatible ones with their reason), and
targets. Everything is judged from GGUF headers, without loading weights."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from specchat.catalog import compat
from specchat.catalog.catalog import local_ggufs, models_dir
from specchat.catalog.layout import layout_note, load_derived
from specchat.catalog.tuned import load_tuned
from specchat.choices import DraftChoice
from specchat.errors import ModelFileError
from specchat.wording import speedup_text


@dataclass(frozen=True)
class ModelChoice:
    value: str
    """What `--draft` / `--target` would take: none, ngram, or a GGUF path."""
    label: str
    ok: bool
    reason: str
    """Why it cannot be chosen (or, for a target, what it means for the current draft)."""
    note: str = ""
    """What `specchat models optimize` measured of this file (its layout, cost and quality)."""


def draft_choices(target: Path) -> list[ModelChoice]:
    """none, n-gram, every GGUF in the models folders judged against the target, then each
    compatible one combined with n-gram lookup (n-gram matches first, the model otherwise)."""
    choices = [
        ModelChoice(str(DraftChoice()), "none: target only (the baseline)", True, ""),
        ModelChoice(str(DraftChoice(ngram=True)), "n-gram: prompt lookup, no draft model", True,
                    ""),
    ]
    records = load_derived(models_dir())
    for path in sorted(local_ggufs()):
        if path == target.resolve():
            continue
        try:
            verdict = compat.check(target, path)
            choices.append(ModelChoice(str(path), path.stem, verdict.ok or verdict.as_text,
                                       verdict.drafting, layout_note(records, path, "draft")))
        except ModelFileError as exc:
            choices.append(ModelChoice(str(path), path.stem, False, str(exc)))
    choices += [ModelChoice(str(DraftChoice(ngram=True, model=c.value)),
                            f"combined: n-gram first, then {c.label}", True, "")
                for c in choices[2:] if c.ok]
    tuned = load_tuned(models_dir()).get(target.name, {})
    return [replace(c, note="\n  ".join(filter(None, (
        c.note, tuned_note(tuned.get(DraftChoice.parse(c.value).key))))))
            for c in choices]


def tuned_note(measured: dict[str, Any] | None) -> str:
    """What `specchat tune` measured of a draft with this target here, in one line."""
    if not measured:
        return ""
    speed = speedup_text(measured.get("measured_speedup"), measured.get("measured_low"),
                         measured.get("measured_high"))
    accept = measured.get("acceptance")
    return (f"tune here ({measured.get('when', '?')}): {speed} at {measured.get('policy')} "
            f"k={measured.get('k')}"
            + (f", acceptance {accept:.0%}" if accept is not None else "")
            + (f", a draft pass {measured['draft_steps']:.2f} target steps"
               if measured.get("draft_steps") else ""))


def target_choices(draft: Path | None) -> list[ModelChoice]:
    """Every readable GGUF in the models folders; with a draft model in use, each says whether
    that draft can go on drafting for it."""
    choices = []
    records = load_derived(models_dir())
    for path in sorted(local_ggufs()):
        try:
            info = compat.header(path)
        except ModelFileError as exc:
            choices.append(ModelChoice(str(path), path.stem, False, str(exc)))
            continue
        note = ""
        if draft is not None and path != draft.resolve():
            verdict = compat.check(path, draft)
            note = "" if verdict.ok else verdict.drafting if verdict.as_text else \
                f"the draft falls back to none: {verdict.reason}"
        choices.append(ModelChoice(str(path), f"{path.stem} ({info.quantization}, "
                                               f"{info.file_size / 1e9:.2f} GB)", True, note,
                                   layout_note(records, path, "target")))
    return choices


class ModelMenu(ModalScreen[str | None]):
    """Pick a model; the ones that cannot be chosen are listed, disabled, with the reason."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Close")]
    DEFAULT_CSS = """
    ModelMenu { align: center middle; }
    ModelMenu > Vertical { width: 96; height: auto; max-height: 80%; border: thick $primary;
                           background: $surface; padding: 1 2; }
    ModelMenu OptionList { height: auto; max-height: 20; }
    """

    def __init__(self, title: str, choices: list[ModelChoice], current: str,
                 empty_note: str = "") -> None:
        super().__init__()
        self.title_text, self.choices, self.current = title, choices, current
        self.empty_note = empty_note

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"[b]{self.title_text}[/b] (now: {self.current})")
            options = []
            for c in self.choices:
                mark = "[dim]✗[/dim] " if not c.ok else ""
                text = f"{c.label}  [dim]{mark}{c.reason}[/dim]" if c.reason else c.label
                if c.note:
                    text += f"\n  [dim]{c.note}[/dim]"
                options.append(Option(text, id=c.value, disabled=not c.ok))
            yield OptionList(*options)
            if self.empty_note:
                yield Label(f"[dim]{self.empty_note}[/dim]")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)
