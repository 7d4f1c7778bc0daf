"""What `specchat tune` measured of each draft for a target on this machine, kept beside the
models (tuned.toml), so the draft menu can say what a draft buys here before it is chosen."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

TUNED_FILE = "tuned.toml"


def load_tuned(models_dir: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """target file name -> draft key -> what tune measured; an unreadable file reads as none."""
    try:
        return tomllib.loads((models_dir / TUNED_FILE).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, ValueError):
        return {}


def save_tuned(models_dir: Path, target: str, measured: dict[str, dict[str, Any]]) -> None:
    """Add or replace the drafts `measured` for `target` (a temporary file, then moved)."""
    records = load_tuned(models_dir)
    records.setdefault(target, {}).update(measured)
    models_dir.mkdir(parents=True, exist_ok=True)
    tmp = models_dir / (TUNED_FILE + ".tmp")
    tmp.write_text(tomli_w.dumps(records), encoding="utf-8")
    os.replace(tmp, models_dir / TUNED_FILE)
