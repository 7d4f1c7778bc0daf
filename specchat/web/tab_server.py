"""`specchat serve`: specchat in every browser tab of a room, each tab its own app process.

Built on Textualize's textual-serve (one process per websocket, the terminal drawn by xterm.js in
the page). What specchat adds: a cap on tabs with a page that says the room is full instead of a
tab that hangs, URLs taken from each request (so a tab opened at the machine's LAN address
connects back to it, not to 0.0.0.0), a page that names itself and loads nothing from the
internet (a workshop room may have none), a history file per tab, so attendees never see
each other's conversations, and on a network an access code: a page or websocket request
without the room's code gets a page saying to ask the host, and no app process starts. The
tab opened with the presenter's code leads the lesson (specchat/lesson/follow.py): the others
follow its step. The page drops both codes from its address bar once it has them (the access
code lives on in a cookie, the presenter's in that tab's own sessionStorage, sent in the
websocket's path), so a projected address bar shows neither, and another tab of the
presenter's browser opened on the attendees' address follows like any other.
"""

from __future__ import annotations

import hmac
import json
import secrets
import shlex
import socket
import sys
import tempfile
import time
from contextvars import ContextVar
from dataclasses import asdict, replace
from pathlib import Path

import aiohttp_jinja2
from aiohttp import web
from textual_serve.server import Server

from specchat.chat.history import HISTORY_ENV
from specchat.errors import SpecchatError
from specchat.exposure import check_host, is_loopback
from specchat.lesson.exercises import RoomRun
from specchat.lesson.follow import PRESENTER, ROLE_ENV, SYNC_ENV
from specchat.lesson.room_board import TOKEN_ENV, TOKEN_HEADER, URL_ENV

TEMPLATES = Path(__file__).resolve().parent / "templates"
TITLE = "specchat: speculative decoding, live"
EXPOSED_WARNING = (
    "warning: specchat serve at {endpoint} has no authentication: anyone who can reach this port "
    "gets a specchat of their own on this machine (its CPU, and the models or llama-server it is "
    "given). Use it only on a network you trust, such as a workshop room's.")


COOKIE = "specchat_room"
RUNS_PATH = "/room/runs"
"""Where tabs post their exercise runs and read the room's."""
LEAD_PATH = "/ws/lead/{code}"
"""The websocket of a tab holding the presenter's code (the page adds it to the path)."""
CODE_NOTE = (
    "note: specchat serve at {endpoint} lets in only requests with this room's access code, "
    "which the address below carries: share that address with the room only (--open drops the "
    "code).")


def app_command(app_args: list[str], history_dir: Path, presenter: bool = False,
                board: tuple[str, str] | None = None) -> str:
    """The shell command textual-serve runs for each tab: this specchat with `app_args`, writing
    its history to a file of its own in `history_dir` ($$ is the tab's shell, unique per tab),
    following the lesson's presenter through a file there (or leading it: `presenter`), and
    posting its exercise runs to `board` (the room's runs address and the tab's own token)."""
    history = shlex.quote(str(history_dir)) + "/tab-$$.sqlite3"
    sync = shlex.quote(str(history_dir / "lesson-step.json"))
    role = f"{ROLE_ENV}={PRESENTER} " if presenter else ""
    runs = (f"{URL_ENV}={shlex.quote(board[0])} {TOKEN_ENV}={shlex.quote(board[1])} "
            if board else "")
    return (f"{HISTORY_ENV}={history} {SYNC_ENV}={sync} {role}{runs}exec "
            + shlex.join([sys.executable, "-m", "specchat", *app_args]))


_PRESENTS: ContextVar[bool] = ContextVar("specchat_presents", default=False)
"""Whether the websocket being handled is the presenter's (each request is its own task)."""
_TOKEN: ContextVar[str] = ContextVar("specchat_tab_token", default="")
"""The token of the tab whose websocket is being handled."""
POST_BYTES = 2048
"""The most a posted run may weigh."""
POST_EVERY_S = 2.0
"""The least time between two runs of one tab."""
RUNS_A_TAB = 100


class TabServer(Server):
    """textual-serve's server with a cap on live tabs and per-request URLs."""

    def __init__(self, app_args: list[str], host: str, port: int, max_sessions: int,
                 history_dir: Path, code: str | None = None) -> None:
        super().__init__(app_command(app_args, history_dir), host=host, port=port, title=TITLE,
                         templates_path=TEMPLATES)
        self.app_args = app_args
        self.max_sessions = max_sessions
        self.history_dir = history_dir
        self.live = 0
        """Tabs whose app process is running now."""
        self.code = code
        """The room's access code (None: anyone who reaches the port gets in)."""
        self.presenter_code = secrets.token_urlsafe(6)
        """What the presenter's address carries: that tab leads the lesson, the others follow."""
        self.tabs: dict[str, int] = {}
        """Each tab's token (its process has it) -> the tab's number in the room."""
        self.runs: list[RoomRun] = []
        """The exercise runs the tabs posted, in order."""
        self.last_post: dict[int, float] = {}

    @property
    def command(self) -> str:
        """The tab's app command, the presenter's with its role (read when textual-serve starts
        the tab's process, inside the request's task)."""
        board = (f"http://{self.local_host}:{self.port}{RUNS_PATH}", _TOKEN.get())
        return app_command(self.app_args, self.history_dir, _PRESENTS.get(), board)

    @command.setter
    def command(self, value: str) -> None:
        """textual-serve sets one command for every tab; specchat's is built per tab."""

    @property
    def local_host(self) -> str:
        """Where a tab's process (on this machine) reaches this server."""
        return "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host

    def presents(self, request: web.Request) -> bool:
        """Whether the websocket came from a tab holding the presenter's code."""
        given = request.match_info.get("code", "")
        return hmac.compare_digest(given.encode(), self.presenter_code.encode())

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.router.add_get(LEAD_PATH, self.handle_websocket)
        app.router.add_get(RUNS_PATH, self.handle_runs)
        app.router.add_post(RUNS_PATH, self.handle_post)
        return app

    def _tab(self, request: web.Request) -> int | None:
        return self.tabs.get(request.headers.get(TOKEN_HEADER, ""))

    async def handle_runs(self, request: web.Request) -> web.Response:
        """Every tab's runs, for a tab of the room."""
        if self._tab(request) is None:
            return web.Response(status=403, text="only a tab of this room reads its runs")
        return web.json_response([asdict(r) for r in self.runs])

    async def handle_post(self, request: web.Request) -> web.Response:
        """A tab's finished run: its own (the tab's number is the token's), bounded in size
        and rate; anything else is refused in one line and changes nothing."""
        tab = self._tab(request)
        if tab is None:
            return web.Response(status=403, text="only a tab of this room posts runs")
        if request.content_length is None or request.content_length > POST_BYTES:
            return web.Response(status=413, text=f"a run is at most {POST_BYTES} bytes")
        now = time.monotonic()
        if now - self.last_post.get(tab, -POST_EVERY_S) < POST_EVERY_S:
            return web.Response(status=429, text=f"one run every {POST_EVERY_S:g} s a tab")
        if sum(r.tab == tab for r in self.runs) >= RUNS_A_TAB:
            return web.Response(status=429, text=f"at most {RUNS_A_TAB} runs a tab")
        try:
            run = replace(RoomRun.from_json(json.loads(await request.read())), tab=tab)
        except ValueError:
            return web.Response(status=400, text="a run is a JSON object")
        except SpecchatError as exc:
            return web.Response(status=400, text=str(exc))
        self.last_post[tab] = now
        self.runs.append(run)
        return web.json_response(asdict(run))

    def admits(self, request: web.Request) -> bool:
        """The page with the code in its address; its websocket with the cookie the page set
        (textual-serve's page adds its own query to the websocket's URL)."""
        given = request.query.get("code") or request.cookies.get(COOKIE, "")
        return self.code is None or hmac.compare_digest(given.encode(), self.code.encode())

    def address(self, host: str, presenter: bool = False) -> str:
        """The address to open on `host`, with the access code (and the presenter's code)."""
        query = [f"code={self.code}"] if self.code else []
        query += [f"presenter={self.presenter_code}"] if presenter else []
        return f"http://{host}:{self.port}/" + ("?" + "&".join(query) if query else "")

    def what_tabs_run(self) -> str:
        return "specchat " + shlex.join(self.app_args) if self.app_args else "specchat"

    async def on_startup(self, app: web.Application) -> None:
        shown = "127.0.0.1" if self.host == "0.0.0.0" else self.host
        where = self.address(shown)
        if not is_loopback(self.host):
            where += f" (attendees: {self.address(lan_address())})"
        print(f"specchat serve on {where}: each tab runs `{self.what_tabs_run()}`, at most "
              f"{self.max_sessions} at once; their histories go to {self.history_dir}. "
              "Ctrl-C stops it.", flush=True)
        print(f"the lesson's presenter opens {self.address(shown, presenter=True)} (F9 or "
              "`specchat lesson`): every other tab in the lesson follows that one", flush=True)

    def _context(self, request: web.Request) -> dict[str, object]:
        origin = f"{request.scheme}://{request.host}"
        websocket = ("wss" if request.scheme == "https" else "ws") + f"://{request.host}/ws"
        fontsize = request.query.get("fontsize", "16")
        return {"title": TITLE, "runs": self.what_tabs_run(), "static": f"{origin}/static/",
                "app_websocket_url": websocket,
                "font_size": int(fontsize) if fontsize.isdigit() else 16,
                "live": self.live, "max_sessions": self.max_sessions}

    async def handle_index(self, request: web.Request) -> web.Response:
        if not self.admits(request):
            return aiohttp_jinja2.render_template("code.html", request, self._context(request),
                                                  status=403)
        if self.live >= self.max_sessions:
            return aiohttp_jinja2.render_template("full.html", request, self._context(request),
                                                  status=503)
        page = aiohttp_jinja2.render_template("app_index.html", request, self._context(request))
        if self.code:
            page.set_cookie(COOKIE, self.code, httponly=True, samesite="Strict")
        return page

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        if not self.admits(request):  # no app process for a request without the code
            websocket = web.WebSocketResponse()
            await websocket.prepare(request)
            await websocket.close(code=1008, message=b"ask the host for the room's address")
            return websocket
        if self.live >= self.max_sessions:  # a tab whose page was served as another took the seat
            websocket = web.WebSocketResponse()
            await websocket.prepare(request)
            await websocket.close(code=1013, message=b"the room is full")
            return websocket
        self.live += 1
        role = _PRESENTS.set(self.presents(request))
        token = secrets.token_urlsafe(12)
        self.tabs[token] = len(self.tabs) + 1
        own = _TOKEN.set(token)
        try:
            return await super().handle_websocket(request)
        finally:
            _PRESENTS.reset(role)
            _TOKEN.reset(own)
            del self.tabs[token]  # its runs stay on the board
            self.live -= 1


def lan_address() -> str:
    """This machine's address on its network (the one a route out would use; nothing is
    sent), else its host name."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return str(s.getsockname()[0])
    except OSError:
        return socket.gethostname()


def tab_server(app_args: list[str], host: str | None, port: int, expose: bool,
               max_sessions: int, open_room: bool = False) -> TabServer:
    """A server ready to run: loopback unless `expose` (then every address, or `host`), with
    a new access code there unless `open_room`; the port checked free, the warning said."""
    host = host or ("0.0.0.0" if expose else "127.0.0.1")
    check_host(host, expose, "specchat serve")
    code = None
    if not is_loopback(host):
        if open_room:
            print(EXPOSED_WARNING.format(endpoint=f"{host}:{port}"), file=sys.stderr)
        else:
            code = secrets.token_urlsafe(6)
            print(CODE_NOTE.format(endpoint=f"{host}:{port}"), file=sys.stderr)
    try:  # the port taken would be a traceback from deep in asyncio; say it first
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as exc:
        raise SpecchatError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    history_dir = Path(tempfile.mkdtemp(prefix="specchat-serve-"))
    return TabServer(app_args, host, port, max_sessions, history_dir, code)
