"""Conversation history in SQLite, written as it happens.

Each message is committed when it exists: the user's when sent, the reply as it grows (marked
incomplete until its turn ends, see `ReplyRecorder`), so a crash or kill loses at most the last
second of a reply, and the next start shows it as interrupted. WAL mode keeps writes cheap.

A file that cannot be opened, read or written (a damaged file, a read-only folder, a full disk,
another process holding the lock) never stops a conversation: the store goes on in memory with
what it could copy, says why in `problem`, and leaves the file as it is.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import platformdirs

from specchat.config import APP
from specchat.engine.events import Event, TokenEvent, TokenKind, TurnEvent

UPGRADES = (
    """
    CREATE TABLE conversations (
        id INTEGER PRIMARY KEY,
        title TEXT NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL,
        target TEXT NOT NULL DEFAULT '',
        draft TEXT NOT NULL DEFAULT '',
        system TEXT
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        stats TEXT,
        created REAL NOT NULL
    );
    CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
    """,
    # 2: replies saved as they grow, marked incomplete until their turn ends
    "ALTER TABLE messages ADD COLUMN complete INTEGER NOT NULL DEFAULT 1;",
)
"""The schema's upgrade steps in order: a file at version v (PRAGMA user_version) runs the
steps after its v-th; a new file runs them all."""
SCHEMA_VERSION = len(UPGRADES)


LOCK_WAIT_S = 1.0
"""How long a write waits for another process's lock before the store goes on in memory (the
UI thread writes)."""
T = TypeVar("T")


HISTORY_ENV = "SPECCHAT_HISTORY"
"""A history file other than the user's own (`specchat serve` gives each browser tab one)."""


def default_history_path() -> Path:
    if os.environ.get(HISTORY_ENV):
        return Path(os.environ[HISTORY_ENV])
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
    complete: bool = True
    """False for a reply whose turn never ended: specchat stopped while writing it."""


def _connect(target: Path | str) -> sqlite3.Connection:
    db = sqlite3.connect(target, check_same_thread=False, isolation_level=None,
                         timeout=LOCK_WAIT_S)
    db.text_factory = lambda raw: raw.decode("utf-8", "replace")  # a damaged file's bytes
    return db


def _version(db: sqlite3.Connection) -> int:
    """The file's schema version; a file written before versions were kept (user_version 0
    with tables) is told by the column version 2 added."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version == 0 and db.execute("SELECT 1 FROM sqlite_master WHERE name = 'messages'"
                                   ).fetchone():
        columns = {row[1] for row in db.execute("PRAGMA table_info(messages)")}
        version = 2 if "complete" in columns else 1
    return int(version)


def _open(target: Path | str) -> sqlite3.Connection:
    """A connection with the schema at SCHEMA_VERSION (an older file upgraded, step by step,
    in one transaction); a file from a newer specchat is refused (sqlite3.DatabaseError)."""
    db = _connect(target)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA foreign_keys=ON")
        version = _version(db)
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(f"written by a newer specchat (schema {version}, this "
                                        f"one knows {SCHEMA_VERSION})")
        if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
            db.executescript("BEGIN;" + "".join(UPGRADES[version:])
                             + f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
        db.execute("SELECT count(*) FROM messages JOIN conversations "
                   "ON conversations.id = conversation_id").fetchone()
    except BaseException:
        db.close()
        raise
    return db


class HistoryStore:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_history_path()
        self.problem: str | None = None
        """Why the history is not being saved to `path` (None while it is)."""
        self._fresh = False
        """The store is an empty in-memory database: nothing left to fall back to."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = _open(self.path)
        except (OSError, sqlite3.Error, UnicodeDecodeError) as exc:
            self._db, self._fresh = _open(":memory:"), True
            self.problem = _problem(self.path, "cannot be opened", exc)

    def _use(self, act: Callable[[sqlite3.Connection], T]) -> T:
        """Run `act` in one transaction. If the file fails it, go on in memory with a copy of
        what the file holds (ids stay valid), and if the copy fails it too, in an empty one;
        the file is left as it is."""
        try:
            with self._db:
                return act(self._db)
        except (sqlite3.Error, UnicodeDecodeError) as exc:  # a damaged schema's error message
            if self._fresh:
                raise
            self._to_memory(exc, copy=self.problem is None)
            return self._use(act)

    def _to_memory(self, exc: Exception, copy: bool) -> None:
        memory = None
        if copy:
            memory = _connect(":memory:")
            try:
                self._db.backup(memory)
                memory.execute("PRAGMA foreign_keys=ON")
                if memory.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                    raise sqlite3.DatabaseError("the copy is damaged too")
            except (sqlite3.Error, UnicodeDecodeError):
                memory.close()
                memory = None
        if memory is None:
            memory, self._fresh = _open(":memory:"), True
            memory.execute("PRAGMA foreign_keys=OFF")  # rows may name conversations it lost
        self._db.close()
        self._db = memory
        self.problem = self.problem or _problem(self.path, "cannot be written", exc)

    def new_conversation(self, title: str, target: str, draft: str,
                         system: str | None = None) -> int:
        now = time.time()

        def insert(db: sqlite3.Connection) -> int:
            cur = db.execute(
                "INSERT INTO conversations(title, created, updated, target, draft, system) "
                "VALUES (?, ?, ?, ?, ?, ?)", (title, now, now, target, draft, system))
            assert cur.lastrowid is not None
            return cur.lastrowid

        return self._use(insert)

    def add_message(self, conversation_id: int, role: str, content: str,
                    stats: dict[str, Any] | None = None, complete: bool = True) -> int:
        """Insert a message; return its id (a growing reply is updated through it)."""
        now = time.time()

        def insert(db: sqlite3.Connection) -> int:
            cur = db.execute(
                "INSERT INTO messages(conversation_id, role, content, stats, created, complete) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (conversation_id, role, content, json.dumps(stats) if stats else None, now,
                 int(complete)))
            db.execute("UPDATE conversations SET updated = ? WHERE id = ?",
                       (now, conversation_id))
            assert cur.lastrowid is not None
            return cur.lastrowid

        return self._use(insert)

    def update_message(self, message_id: int, content: str,
                       stats: dict[str, Any] | None = None, complete: bool = False) -> None:
        self._use(lambda db: db.execute(
            "UPDATE messages SET content = ?, stats = ?, complete = ? WHERE id = ?",
            (content, json.dumps(stats) if stats else None, int(complete), message_id)))

    def set_models(self, conversation_id: int, target: str, draft: str) -> None:
        self._use(lambda db: db.execute(
            "UPDATE conversations SET target = ?, draft = ? WHERE id = ?",
            (target, draft, conversation_id)))

    def conversations(self) -> list[StoredConversation]:
        rows = self._use(lambda db: db.execute(
            "SELECT id, title, updated, target, draft, system FROM conversations "
            "ORDER BY updated DESC").fetchall())
        return [StoredConversation(*row) for row in rows]

    def conversation(self, conversation_id: int) -> StoredConversation:
        row = self._use(lambda db: db.execute(
            "SELECT id, title, updated, target, draft, system FROM conversations WHERE id = ?",
            (conversation_id,)).fetchone())
        if row is None:
            raise KeyError(conversation_id)
        return StoredConversation(*row)

    def messages(self, conversation_id: int) -> list[StoredMessage]:
        rows = self._use(lambda db: db.execute(
            "SELECT role, content, stats, complete FROM messages WHERE conversation_id = ? "
            "ORDER BY id", (conversation_id,)).fetchall())
        return [StoredMessage(r, c, _stats(s), bool(done)) for r, c, s, done in rows]

    def interrupted(self) -> list[StoredConversation]:
        """Conversations with a reply whose turn never ended, newest first."""
        cut = {row[0] for row in self._use(lambda db: db.execute(
            "SELECT DISTINCT conversation_id FROM messages WHERE complete = 0").fetchall())}
        return [c for c in self.conversations() if c.id in cut]

    def rename(self, conversation_id: int, title: str) -> None:
        self._use(lambda db: db.execute("UPDATE conversations SET title = ? WHERE id = ?",
                                        (title, conversation_id)))

    def delete(self, conversation_id: int) -> None:
        self._use(lambda db: db.execute("DELETE FROM conversations WHERE id = ?",
                                        (conversation_id,)))

    def export_markdown(self, conversation_id: int) -> str:
        """The conversation with each reply's measured stats under it."""
        conv = self.conversation(conversation_id)
        out = [f"# {conv.title}", "", f"target: {conv.target} · draft: {conv.draft}", ""]
        if conv.system:
            out += [f"**system:** {conv.system}", ""]
        for m in self.messages(conversation_id):
            out += [f"## {m.role}" + ("" if m.complete else " (interrupted)"), "", m.content, ""]
            if m.stats:
                out += ["| stat | value |", "|---|---|"]
                out += [f"| {k} | {v} |" for k, v in m.stats.items()]
                out.append("")
        return "\n".join(out)

    def close(self) -> None:
        self._db.close()


def _stats(text: str | None) -> dict[str, Any] | None:
    """A message's stats column; a damaged one reads as none."""
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _problem(path: Path, what: str, exc: BaseException) -> str:
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"history not saved: {path} {what} ({reason}); this session's chat is kept in memory"


STATS = ("n_tokens", "n_drafted", "n_accepted", "acceptance_rate", "mean_accepted_length",
         "tokens_per_second", "speedup", "ttft_s", "target_passes", "draft", "k", "stop_reason",
         "context_shifts")
"""The turn numbers kept with each reply."""


class ReplyRecorder:
    """An event sink that saves a turn as it happens: the reply is inserted incomplete with its
    first piece, rewritten at most every `every_s` seconds as it grows, and completed with the
    turn's stats when the turn ends (a stopped reply too)."""

    def __init__(self, store: HistoryStore, conversation_id: int, every_s: float = 1.0) -> None:
        self.store, self.conversation_id, self.every_s = store, conversation_id, every_s
        self.text = ""
        self.message_id: int | None = None
        self.saved_at = 0.0
        self.write_s = 0.0
        """Seconds spent writing (the benchmark compares it with the turn's)."""

    def __call__(self, event: Event) -> None:
        if isinstance(event, TokenEvent) and event.kind is not TokenKind.REJECTED:
            self.text += event.text
            if time.monotonic() - self.saved_at >= self.every_s:
                self._save(self.text, None, complete=False)
        elif isinstance(event, TurnEvent):
            flat = event.to_json()
            self._save(event.text, {k: flat[k] for k in STATS}, complete=True)

    def _save(self, text: str, stats: dict[str, Any] | None, complete: bool) -> None:
        t0 = time.perf_counter()
        if self.message_id is None:
            self.message_id = self.store.add_message(self.conversation_id, "assistant", text,
                                                     stats, complete)
        else:
            self.store.update_message(self.message_id, text, stats, complete)
        self.saved_at = time.monotonic()
        self.write_s += time.perf_counter() - t0
