"""The policy's memory of each target's draft sources (engine/policy/memory.py), kept in a JSON
file beside the history file it goes with (a browser tab's history has its own): written after
each local reply, read when a session is opened for a conversation, so that a one-off
`specchat ask` and the app's first reply start from what earlier replies measured on this
target. A file that cannot be read or written only means starting from the priors."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from specchat.chat.session import ChatSession
from specchat.engine.policy.memory import recall, remembered


def beside(history: Path) -> Path:
    """The memory file that goes with the history file `history`."""
    return history.with_name(history.stem + ".learned.json")


class LearnedStore:
    """One memory file: what was learned with each target, by its path."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def recall(self, session: ChatSession) -> None:
        """Start the session's policy from what was learned with its target (the priors where
        nothing usable was)."""
        recall(session.engine.policy.costs, self._read().get(session.names()[0]))

    def keep(self, session: ChatSession) -> None:
        """Write what the session's policy knows now, for its target (the other targets'
        entries as they are), replacing the file at once: a reader never sees half of it."""
        data = self._read() | {session.names()[0]: remembered(session.engine.policy.costs)}
        name = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=self.path.parent, suffix=".part")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out)
            os.replace(name, self.path)
        except OSError:
            if name is not None:
                Path(name).unlink(missing_ok=True)


def remember(session: object, history: Path) -> None:
    """A local session's policy starts from the memory beside `history` and keeps it after
    each reply (a llama-server's session has no policy here: nothing to do)."""
    if isinstance(session, ChatSession):
        session.learned = LearnedStore(beside(history))
        session.learned.recall(session)
