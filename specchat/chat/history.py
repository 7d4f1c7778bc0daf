"""Conversation history in SQLite, written as it happens.

Each message is committed when it exists (the user's when sent, the reply when its turn ends),
so a crash or kill loses at most the reply being generated. WAL mode keeps writes cheap.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

from specchat.config import APP

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    target TEXT NOT NULL DEFAULT '',
    draft TEXT NOT NULL DEFAULT '',
    system TEXT
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    stats TEXT,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""


def default_history_path() -> Path:
    return Path(platformdirs.user_data_dir(APP)) / "history.sqlite3"


@dataclass(frozen=True)
class StoredConversation:
    id: int
    title: str
    updated: float
    target: str
    draft: str
    system: str | None


@dataclass(frozen=True)
class StoredMessage:
    role: str
    content: str
    stats: dict[str, Any] | None


class HistoryStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_history_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)

    def new_conversation(self, title: str, target: str, draft: str,
                         system: str | None = None) -> int:
        now = time.time()
        cur = self._db.execute(
            "INSERT INTO conversations(title, created, updated, target, draft, system) "
            "VALUES (?, ?, ?, ?, ?, ?)", (title, now, now, target, draft, system))
        assert cur.lastrowid is not None
        return cur.lastrowid

    def add_message(self, conversation_id: int, role: str, content: str,
                    stats: dict[str, Any] | None = None) -> None:
        now = time.time()
        with self._db:
            self._db.execute(
                "INSERT INTO messages(conversation_id, role, content, stats, created) "
                "VALUES (?, ?, ?, ?, ?)",
                (conversation_id, role, content, json.dumps(stats) if stats else None, now))
            self._db.execute("UPDATE conversations SET updated = ? WHERE id = ?",
                             (now, conversation_id))

    def set_models(self, conversation_id: int, target: str, draft: str) -> None:
        self._db.execute("UPDATE conversations SET target = ?, draft = ? WHERE id = ?",
                         (target, draft, conversation_id))

    def conversations(self) -> list[StoredConversation]:
        rows = self._db.execute(
            "SELECT id, title, updated, target, draft, system FROM conversations "
            "ORDER BY updated DESC").fetchall()
        return [StoredConversation(*row) for row in rows]

    def conversation(self, conversation_id: int) -> StoredConversation:
        row = self._db.execute(
            "SELECT id, title, updated, target, draft, system FROM conversations WHERE id = ?",
            (conversation_id,)).fetchone()
        if row is None:
            raise KeyError(conversation_id)
        return StoredConversation(*row)

    def messages(self, conversation_id: int) -> list[StoredMessage]:
        rows = self._db.execute(
            "SELECT role, content, stats FROM messages WHERE conversation_id = ? ORDER BY id",
            (conversation_id,)).fetchall()
        return [StoredMessage(r, c, json.loads(s) if s else None) for r, c, s in rows]

    def rename(self, conversation_id: int, title: str) -> None:
        self._db.execute("UPDATE conversations SET title = ? WHERE id = ?",
                         (title, conversation_id))

    def delete(self, conversation_id: int) -> None:
        self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def export_markdown(self, conversation_id: int) -> str:
        """The conversation with each reply's measured stats under it."""
        conv = self.conversation(conversation_id)
        out = [f"# {conv.title}", "", f"target: {conv.target} · draft: {conv.draft}", ""]
        if conv.system:
            out += [f"**system:** {conv.system}", ""]
        for m in self.messages(conversation_id):
            out += [f"## {m.role}", "", m.content, ""]
            if m.stats:
                out += ["| stat | value |", "|---|---|"]
                out += [f"| {k} | {v} |" for k, v in m.stats.items()]
                out.append("")
        return "\n".join(out)

    def close(self) -> None:
        self._db.close()
