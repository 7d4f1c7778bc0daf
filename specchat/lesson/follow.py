"""Tabs that follow the presenter: in a room, every tab's app process is told (by
environment) where the presenter's current step is kept, and the presenter's tab whether it
leads. A small JSON file written atomically by the presenter's process and read by the others:
they all run on the room's machine, and only processes the room started know its path."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

SYNC_ENV = "SPECCHAT_LESSON_SYNC"
"""The file holding the presenter's step."""
ROLE_ENV = "SPECCHAT_LESSON_ROLE"
PRESENTER = "presenter"


@dataclass(frozen=True)
class LessonSync:
    path: Path
    presenter: bool

    @classmethod
    def from_env(cls) -> LessonSync | None:
        """The room's sync, where this process was started in one."""
        path = os.environ.get(SYNC_ENV)
        return cls(Path(path), os.environ.get(ROLE_ENV) == PRESENTER) if path else None

    def publish(self, step: int) -> None:
        """The presenter is on `step` (from 0): written whole, then renamed into place, so a
        reader never sees half of it."""
        if not self.presenter:
            return
        part = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        part.write_text(json.dumps({"step": step}), encoding="utf-8")
        os.replace(part, self.path)

    def read(self) -> int | None:
        """The presenter's step, or None before the presenter opened the lesson."""
        try:
            step = json.loads(self.path.read_text(encoding="utf-8")).get("step")
        except (OSError, ValueError, AttributeError):
            return None
        return step if isinstance(step, int) and step >= 0 else None
