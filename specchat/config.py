"""The user's config file: a TOML file in platformdirs' config dir.

A broken file is reported once with its path and the parse error, defaults are used, and the
file is never overwritten: saving refuses until the user fixes it. A known key with a value of
the wrong type is reported and ignored (the `[engine]` section is checked by settings.py).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs
import tomli_w

from specchat.errors import SpecchatError

APP = "specchat"
KNOWN: dict[tuple[str, str], type] = {
    ("models", "dir"): str, ("models", "folders"): list, ("models", "files"): list,
    ("models", "optimize_offer"): str, ("ui", "theme"): str, ("ui", "show_rejected"): bool,
}
"""Keys outside [engine] that specchat reads, and their types (a list holds strings)."""


def config_path() -> Path:
    env = os.environ.get("SPECCHAT_CONFIG")
    return Path(env) if env else Path(platformdirs.user_config_dir(APP)) / "config.toml"


@dataclass
class Config:
    path: Path
    data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    """Why the file could not be read; set means defaults are in use and saving is refused."""
    problems: list[str] = field(default_factory=list)
    """One line for each known value that had the wrong type and is ignored."""

    @classmethod
    def load(cls, path: Path | None = None) -> Config:
        path = path or config_path()
        if not path.exists():
            return cls(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, OSError, ValueError, RecursionError) as exc:
            reason = " ".join(str(exc).split())
            return cls(path, error=f"config file {path} is broken ({reason}); using defaults")
        config = cls(path, data)
        for (name, key), kind in KNOWN.items():
            section = config.section(name)
            value: Any = section.get(key)
            if value is None or isinstance(value, kind) and (
                    not isinstance(value, list) or all(isinstance(v, str) for v in value)):
                continue
            del section[key]
            config.problems.append(f"config [{name}] {key}: {value!r:.40} is not "
                                   f"{'a list of strings' if kind is list else kind.__name__}; "
                                   "ignored")
        return config

    def section(self, name: str) -> dict[str, Any]:
        value = self.data.get(name, {})
        return value if isinstance(value, dict) else {}

    def save(self) -> None:
        if self.error:
            raise SpecchatError(f"not saving settings: {self.error}. Fix or remove the file first.")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".toml.tmp")
        tmp.write_text(tomli_w.dumps(self.data), encoding="utf-8")
        os.replace(tmp, self.path)
