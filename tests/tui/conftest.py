"""The app for snapshot tests, and a cursor that does not blink in any app test."""

from __future__ import annotations

import pytest
from support.pilot import make_app
from textual.widgets import TextArea


@pytest.fixture(autouse=True)
def steady_cursor(monkeypatch):
    """The input box's cursor stays visible: a blink between two frames would change a
    snapshot, and a blink redraw is work a test does not ask for."""
    monkeypatch.setattr(TextArea, "_toggle_cursor_blink_visible", lambda self: None)


@pytest.fixture
def snapshot_app(tiny, tmp_path, monkeypatch):
    """The app on the tiny pair for snapshots: its own config, the tiny models' folder as the
    models folder (the menus list them), no warm-up turn."""
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tiny.target.parent))
    monkeypatch.setenv("SPECCHAT_CONFIG", str(tmp_path / "config.toml"))
    return make_app(tiny, tmp_path, warm_up=False)
