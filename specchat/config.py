"""The user's config file: a TOML file in platformdirs' config dir.

A broken file is reported once with its path and the parse error, defaults are used, and the
file is never overwritten: saving refuses until the user fixes it.
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


def config_path() -> Path:
    env = os.environ.get("SPECCHAT_CONFIG")
    return Path(env) if env else Path(platformdirs.user_config_dir(APP)) / "config.toml"


@dataclass
class Config:
    path: Path
    data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    """Why the file could not be read; set means defaults are in use and saving is refused."""

    @classmethod
    def load(cls, path: Path | None = None) -> Config:
        path = path or config_path()
        if not path.exists():
            return cls(path)
        try:
            return cls(path, tomllib.loads(path.read_text(encoding="utf-8")))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:
            return cls(path, error=f"config file {path} is broken ({exc}); using defaults")

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
