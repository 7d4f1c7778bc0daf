"""Every reader of outside input, fuzzed: random bytes, real files cut short at any byte or with
a byte changed, and well-formed files with values of any type. Each read either works or ends in
a SpecchatError of one clear line; never a traceback or a hang (the deadline). The counts are
printed at the end of the run (`fuzzed inputs per reader`)."""

from __future__ import annotations

import functools
import sqlite3
import tempfile
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rich.console import Console
from support.fuzz import read_or_one_line

from specchat import settings as schema
from specchat.bench.runner import BUILTIN_PROMPTS, load_prompts
from specchat.catalog import catalog as catalog_module
from specchat.catalog.catalog import Catalog
from specchat.catalog.commands import cmd_add
from specchat.catalog.gguf_file import read_gguf
from specchat.chat.history import HistoryStore
from specchat.config import Config
from specchat.resources import resource_dir
from specchat.trace import read_trace, shipped_traces

FUZZ = settings(max_examples=400, deadline=2000,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
toml_values = st.recursive(
    st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)
toml_docs = st.dictionaries(st.text(max_size=10), toml_values, max_size=5)


def file_with(data: bytes, name: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="specchat-fuzz-"))
    path = folder / name
    path.write_bytes(data)
    return path


def damaged(original: bytes) -> st.SearchStrategy[bytes]:
    """The file cut short at any byte, or with one byte changed, or random bytes."""
    cut = st.integers(0, len(original)).map(lambda n: original[:n])
    flipped = st.tuples(st.integers(0, len(original) - 1), st.integers(0, 255)).map(
        lambda f: original[:f[0]] + bytes([f[1]]) + original[f[0] + 1:])
    return cut | flipped | st.binary(max_size=2000)


# -- config ----------------------------------------------------------------------------------


def read_config(path: Path) -> None:
    config = Config.load(path)
    for line in ([config.error] if config.error else []) + config.problems:
        assert "\n" not in line
    _, problems = schema.from_config(config.section("engine"))
    assert all("\n" not in line for line in problems)
    catalog_module.model_folders(config)
    catalog_module.local_ggufs(config)
    if config.error:
        with pytest.raises(Exception, match="not saving settings"):
            config.save()


@FUZZ
@given(damaged(b'[engine]\nk = 4\ntemperature = 0.7\n[ui]\ntheme = "specchat-light"\n'
               b'[models]\nfolders = ["/tmp"]\n'))
def test_config_bytes(data):
    path = file_with(data, "config.toml")
    read_or_one_line("config TOML (bytes)", read_config, path)
    assert path.read_bytes() == data  # never rewritten


@FUZZ
@given(st.fixed_dictionaries({}, optional={"engine": st.dictionaries(
    st.sampled_from([f.name for _, f in schema.form_fields()]), scalars),
    "ui": st.dictionaries(st.sampled_from(["theme", "show_rejected"]), toml_values),
    "models": st.dictionaries(st.sampled_from(["dir", "folders", "files"]), toml_values)})
    | toml_docs)
@example({"models": {"dir": "~0", "folders": ["~0"]}})  # a user this machine does not have
def test_config_values_of_any_type(doc):
    try:
        text = tomli_w.dumps(doc)
    except (TypeError, ValueError):  # None and NaN have no TOML form
        return
    read_or_one_line("config TOML (values)", read_config, file_with(text.encode(), "config.toml"))


# -- model catalog ---------------------------------------------------------------------------

CATALOG = (resource_dir("models") / "catalog.toml").read_bytes()


@FUZZ
@given(damaged(CATALOG))
def test_catalog_bytes(data):
    read_or_one_line("catalog TOML (bytes)", Catalog.load, file_with(data, "catalog.toml"))


@FUZZ
@given(st.fixed_dictionaries({"models": st.dictionaries(st.text(max_size=8), toml_values,
                                                        max_size=3),
                              "pairs": toml_values}) | toml_docs)
def test_catalog_values_of_any_type(doc):
    text = tomli_w.dumps(doc)
    read_or_one_line("catalog TOML (values)", Catalog.load, file_with(text.encode(), "catalog.toml"))


# -- traces ----------------------------------------------------------------------------------

TRACE = shipped_traces()[0].read_bytes()[:6000]


@FUZZ
@given(damaged(TRACE))
def test_trace_bytes(data):
    read_or_one_line("trace JSONL (bytes)", read_trace, file_with(data, "t.jsonl"))


@FUZZ
@given(st.integers(1, TRACE.count(b"\n") - 1), st.sampled_from(["text", "t_s", "kind", "round",
                                                                 "accepted_by_position", "p"]),
       toml_values | st.none())
def test_trace_fields_of_any_type(line, field, value):
    import json

    lines = TRACE.decode().splitlines()[:line + 1]
    event = json.loads(lines[line])
    event[field] = value
    lines[line] = json.dumps(event)
    read_or_one_line("trace JSONL (values)", read_trace,
                     file_with("\n".join(lines).encode(), "t.jsonl"))


# -- GGUF headers ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gguf(tiny) -> Path:
    return tiny.target


@FUZZ
@given(data=st.data())
def test_gguf_headers(gguf, data):
    gguf_bytes = gguf.read_bytes()
    header = gguf_bytes[:20000]  # the header and the start of the data: where the parser reads
    raw = data.draw(damaged(header) | st.integers(0, len(gguf_bytes)).map(
        lambda n: gguf_bytes[:n]))
    read_or_one_line("GGUF header", read_gguf, file_with(raw, "m.gguf"))


# -- `models add` paths ----------------------------------------------------------------------


@FUZZ
@given(st.text(max_size=60) | st.sampled_from(["~", "~nobody-here/x.gguf", "/", "/dev/null",
                                               ".", "\x00", "a" * 5000, "/proc/self/mem"]))
def test_models_add_paths(path_text):
    config = Config(Path(tempfile.mkdtemp(prefix="specchat-fuzz-")) / "config.toml")
    read_or_one_line("models add path", cmd_add, path_text, Console(file=open("/dev/null", "w")),
                     config)


# -- the prompt suite file -------------------------------------------------------------------


@FUZZ
@given(damaged(BUILTIN_PROMPTS.read_bytes()[:3000]))
def test_prompt_suite_bytes(data):
    read_or_one_line("prompt suite (bytes)", load_prompts, file_with(data, "prompts.toml"))


@FUZZ
@given(st.fixed_dictionaries({"prompt": st.lists(st.dictionaries(
    st.sampled_from(["category", "name", "text", "max_tokens"]), toml_values), max_size=3)})
    | toml_docs)
def test_prompt_suite_values_of_any_type(doc):
    read_or_one_line("prompt suite (values)", load_prompts,
                     file_with(tomli_w.dumps(doc).encode(), "prompts.toml"))


# -- the history database --------------------------------------------------------------------

OLD_SCHEMA = """
CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL,
    updated REAL NOT NULL, target TEXT NOT NULL DEFAULT '', draft TEXT NOT NULL DEFAULT '',
    system TEXT);
CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL
    REFERENCES conversations(id) ON DELETE CASCADE, role TEXT NOT NULL, content TEXT NOT NULL,
    stats TEXT, created REAL NOT NULL);
INSERT INTO conversations VALUES (1, 'old chat', 0, 0, 't', 'd', NULL);
INSERT INTO messages VALUES (1, 1, 'user', 'hello', NULL, 0), (2, 1, 'assistant', 'hi', '{}', 0);
"""


def use_history(path: Path) -> None:
    before = path.read_bytes() if path.exists() else None
    store = HistoryStore(path)
    if store.problem:  # a file it cannot open is left as it is
        assert "cannot be opened" in store.problem and path.read_bytes() == before
    for c in store.conversations():
        store.messages(c.id)
    store.interrupted()
    cid = store.new_conversation("fuzz", "t", "d")
    store.add_message(cid, "user", "still talking")
    assert store.messages(cid)[-1].content == "still talking"
    assert store.problem is None or "\n" not in store.problem
    store.close()


EARLIER_VERSIONS = {
    "1, unversioned": OLD_SCHEMA,
    "2, unversioned": OLD_SCHEMA + "ALTER TABLE messages ADD COLUMN complete INTEGER NOT NULL "
                                   "DEFAULT 1; UPDATE messages SET complete = 0 WHERE id = 2;",
}


@pytest.mark.parametrize("version", EARLIER_VERSIONS)
def test_a_history_of_every_earlier_version_opens_upgraded(tmp_path, version):
    """A file written by each earlier specchat: its messages read back, it is at this version
    afterwards (PRAGMA user_version), and new messages are saved to it."""
    from specchat.chat.history import SCHEMA_VERSION

    path = tmp_path / "history.sqlite3"
    with sqlite3.connect(path) as db:
        db.executescript(EARLIER_VERSIONS[version])
    store = HistoryStore(path)
    assert store.problem is None
    complete = version.startswith("1")  # version 1 saved replies only once they were whole
    assert [(m.role, m.content, m.complete) for m in store.messages(1)] == [
        ("user", "hello", True), ("assistant", "hi", complete)]
    store.add_message(1, "user", "and now")
    store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert HistoryStore(path).messages(1)[-1].content == "and now"


def test_a_history_from_a_newer_specchat_is_left_as_it_is(tmp_path):
    from specchat.chat.history import SCHEMA_VERSION

    path = tmp_path / "history.sqlite3"
    HistoryStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = path.read_bytes()
    store = HistoryStore(path)
    assert store.problem and "newer specchat" in store.problem
    store.add_message(store.new_conversation("here", "t", "d"), "user", "kept in memory")
    store.close()
    assert path.read_bytes() == before


@functools.cache
def history_bytes() -> bytes:
    """A history file with three conversations (a function, not a fixture: hypothesis would
    print all its bytes with a failing case)."""
    path = Path(tempfile.mkdtemp(prefix="specchat-fuzz-")) / "history.sqlite3"
    store = HistoryStore(path)
    for i in range(3):
        cid = store.new_conversation(f"chat {i}", "t", "d")
        store.add_message(cid, "user", "question " * 20)
        store.add_message(cid, "assistant", "answer " * 50, {"n_tokens": 50})
    store.close()  # the last connection checkpoints the WAL into the file
    return path.read_bytes()


@FUZZ
@given(data=st.data())
def test_history_database_files(data):
    raw = data.draw(damaged(history_bytes()) | st.sampled_from([b"", b"SQLite format 3\x00"]))
    read_or_one_line("history database", use_history, file_with(raw, "history.sqlite3"))
