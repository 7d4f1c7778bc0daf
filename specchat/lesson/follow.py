"""Tabs that follow the presenter: in a room, every tab's app process is told (by
environment) where the presenter's current step is kept, and a presenter's tab that it may
lead. A small JSON file written atomically by the leading process and read by the others: they
all run on the room's machine, and only processes the room started know its path. One
presenter's tab leads at a time: the file names its process; another presenter's tab follows
until it takes the lead (then the first follows), or the leader's process has ended."""

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

    def _state(self) -> dict[str, object]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def leads(self) -> bool:
        """Whether this process leads: a presenter's, where no other live presenter's does."""
        if not self.presenter:
            return False
        leader = self._state().get("leader")
        return leader in (None, os.getpid()) or not _alive(leader)

    def publish(self, step: int, take_lead: bool = False) -> bool:
        """The presenter is on `step` (from 0), where this tab leads (or takes the lead):
        written whole, then renamed into place, so a reader never sees half of it. Whether it
        was written."""
        if not (take_lead and self.presenter) and not self.leads():
            return False
        part = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        part.write_text(json.dumps({"step": step, "leader": os.getpid()}), encoding="utf-8")
        os.replace(part, self.path)
        return True

    def read(self) -> int | None:
        """The presenter's step, or None before the presenter opened the lesson."""
        step = self._state().get("step")
        return step if isinstance(step, int) and step >= 0 else None


def _alive(pid: object) -> bool:
    """Whether a process of this machine with that id still runs."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
