"""A tab's way to the room's board: its finished exercise runs go to the room's server (the
`specchat serve` that started the tab), and the presenter's tab reads every tab's runs back.
The server gives each tab's process its address and a token of its own (by environment), so
only tabs the room let in can post, and only as themselves."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass

from specchat.errors import SpecchatError
from specchat.lesson.exercises import RoomRun

URL_ENV = "SPECCHAT_ROOM_RUNS"
"""The room server's runs address, as a tab's process reaches it."""
TOKEN_ENV = "SPECCHAT_ROOM_TOKEN"
TOKEN_HEADER = "X-Specchat-Tab"
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class RoomBoard:
    url: str
    token: str

    @classmethod
    def from_env(cls) -> RoomBoard | None:
        """The room's board, where this process is a room's tab."""
        url, token = os.environ.get(URL_ENV), os.environ.get(TOKEN_ENV)
        return cls(url, token) if url and token else None

    def _ask(self, data: bytes | None = None) -> bytes:
        request = urllib.request.Request(self.url, data=data, method="POST" if data else "GET",
                                         headers={TOKEN_HEADER: self.token,
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            why = exc.read().decode("utf-8", "replace").strip() or exc.reason
            raise SpecchatError(f"the room refused: {why}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise SpecchatError(f"the room's server did not answer: {exc}") from None

    def post(self, run: RoomRun) -> RoomRun:
        """Post a run; the room's copy back (with the tab's number)."""
        return RoomRun.from_json_with_tab(json.loads(self._ask(json.dumps(run.to_json()).encode())))

    def runs(self) -> list[RoomRun]:
        """Every tab's runs, as the room holds them."""
        return [RoomRun.from_json_with_tab(item) for item in json.loads(self._ask())]
