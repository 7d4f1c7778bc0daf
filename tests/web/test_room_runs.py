"""The room's board of exercise runs, over real HTTP: a tab's process posts its own runs with
the token its room gave it and reads every tab's back; a post without a token, too big, too
soon, or not a run is refused in one line and changes nothing."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from dataclasses import replace

import pytest
from aiohttp import web
from support.processes import free_port

from specchat.errors import SpecchatError
from specchat.lesson.exercises import RoomRun
from specchat.lesson.room_board import TOKEN_HEADER, RoomBoard
from specchat.web import tab_server
from specchat.web.tab_server import RUNS_PATH, TabServer

RUN = RoomRun(k=3, draft="model", policy="fixed", kind="code", acceptance=0.8,
              tokens_a_round=3.1, speedup=1.2, low=1.05, high=1.3)


@pytest.fixture
def room(tmp_path, monkeypatch):
    """A TabServer's web app on a free port, with two tabs' tokens as its websockets give
    them; posts may follow each other at once unless a test says otherwise."""
    monkeypatch.setattr(tab_server, "POST_EVERY_S", 0.0)
    port = free_port()
    server = TabServer(["--help"], "127.0.0.1", port, 4, tmp_path)
    server.tabs.update({"first-token": 1, "second-token": 2})
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def start() -> web.AppRunner:
        runner = web.AppRunner(await server._make_app())
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return runner
    runner = loop.run_until_complete(start())
    thread = threading.Thread(target=lambda: (ready.set(), loop.run_forever()), daemon=True)
    thread.start()
    ready.wait()
    yield server, f"http://127.0.0.1:{port}{RUNS_PATH}"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.run_until_complete(runner.cleanup())


def _post(url: str, body: bytes, token: str | None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"} | ({TOKEN_HEADER: token} if token else {})
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers, method="POST"),
                                    timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_tab_posts_its_own_runs_and_reads_every_tabs(room):
    server, url = room
    first, second = RoomBoard(url, "first-token"), RoomBoard(url, "second-token")
    assert first.post(RUN).tab == 1
    assert second.post(replace(RUN, tab=1, k=5, speedup=0.9, low=0.8)).tab == 2  # never as another
    assert [(r.tab, r.k) for r in first.runs()] == [(1, 3), (2, 5)]
    assert second.runs() == first.runs() == server.runs


@pytest.mark.parametrize(("body", "token", "status", "says"), [
    (json.dumps(RUN.to_json()), None, 403, "only a tab of this room posts runs"),
    (json.dumps(RUN.to_json()), "a-guess", 403, "only a tab of this room posts runs"),
    ("x" * 3000, "first-token", 413, "a run is at most 2048 bytes"),
    ("not json", "first-token", 400, "a run is a JSON object"),
    (json.dumps(RUN.to_json() | {"text": "my prompt"}), "first-token", 400, "exactly the fields"),
    (json.dumps(RUN.to_json() | {"k": 9}), "first-token", 400, "not one the room knows"),
    (json.dumps(RUN.to_json() | {"speedup": float("nan")}), "first-token", 400, "finite"),
    (json.dumps(RUN.to_json() | {"acceptance": 1.5}), "first-token", 400, "out of their ranges"),
])
def test_a_bad_post_is_refused_in_one_line_and_changes_nothing(room, body, token, status, says):
    server, url = room
    got, text = _post(url, body.encode(), token)
    assert (got, text.count("\n")) == (status, 0) and says in text
    assert server.runs == []


def test_a_second_run_too_soon_is_refused(room, monkeypatch):
    server, url = room
    monkeypatch.setattr(tab_server, "POST_EVERY_S", 60.0)
    board = RoomBoard(url, "first-token")
    board.post(RUN)
    with pytest.raises(SpecchatError, match="the room refused: one run every 60 s a tab"):
        board.post(RUN)
    assert len(server.runs) == 1
    with pytest.raises(SpecchatError, match="only a tab of this room reads its runs"):
        RoomBoard(url, "a-guess").runs()
