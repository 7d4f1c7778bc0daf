"""A client of llama.cpp's own server (`llama-server -m TARGET -md DRAFT`): its models, its chat
template, and a completion streamed token by token with the server's counters.

Plain `http.client` over one connection per request: a stream is read line by line as the
server sends it (server-sent events, `data: {json}`), and closing the connection is how a
reply is stopped. Every failure is a `ServerError` naming the server and what went wrong.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from specchat.errors import SpecchatError

TIMEOUT_S = 600.0
"""No byte from the server for this long ends the request (a prompt of many thousand tokens
on a CPU takes minutes before its first token)."""


class ServerError(SpecchatError):
    """The server could not be reached, or answered with an error."""


@dataclass(frozen=True)
class ServerModels:
    """What a server runs, from /v1/models and /slots (the server names its target; of its
    speculation it says only whether it speculates and with which methods)."""

    target: str
    speculation: str | None
    """The server's speculative methods (`draft-simple`: a draft model, `ngram-simple`, …;
    `speculating` before its first reply, when its slots do not list them yet); None when it
    does not speculate, or hides its slots (--no-slots)."""
    n_ctx: int | None


class ServerClient:
    def __init__(self, url: str, timeout_s: float = TIMEOUT_S) -> None:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServerError(f"--server {url!r} is not a URL like http://127.0.0.1:8080")
        self.url = f"{parts.scheme}://{parts.netloc}"
        self.host, self.port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
        self.https = parts.scheme == "https"
        self.timeout_s = timeout_s

    def connect(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return kind(self.host, self.port, timeout=self.timeout_s)

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None
                 ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = self.connect()
        data = json.dumps(body).encode() if body is not None else None
        try:
            conn.request(method, path, body=data,
                         headers={"Content-Type": "application/json"} if data else {})
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise ServerError(f"llama-server at {self.url} is not answering ({_reason(exc)})") from None
        if response.status != 200:
            text = response.read().decode(errors="replace")
            conn.close()
            raise ServerError(f"llama-server at {self.url} answered {path} with {response.status}: "
                              f"{_error_message(text)}")
        return conn, response

    def get_json(self, path: str, body: dict[str, Any] | None = None) -> Any:
        conn, response = self._request("POST" if body is not None else "GET", path, body)
        try:
            return json.loads(response.read())
        except (OSError, ValueError) as exc:
            raise ServerError(f"llama-server at {self.url} sent no JSON for {path} ({exc})") from None
        finally:
            conn.close()

    def models(self) -> ServerModels:
        listed = self.get_json("/v1/models").get("data") or [{}]
        target = str(listed[0].get("id") or "?")
        n_ctx = (listed[0].get("meta") or {}).get("n_ctx")
        try:
            slot = self.get_json("/slots")[0]
        except (ServerError, IndexError, KeyError, TypeError):
            slot = {}  # started with --no-slots: it does not say
        types = [t for t in str((slot.get("params") or {}).get("speculative.types", "")).split(",")
                 if t and t != "none"]
        speculation = (",".join(types) or "speculating") if slot.get("speculative") else None
        return ServerModels(_stem(target), speculation, int(n_ctx) if n_ctx else None)

    def render_chat(self, messages: list[tuple[str, str]]) -> str:
        """The prompt for `messages` in the server's own chat template."""
        answer = self.get_json("/apply-template", {
            "messages": [{"role": role, "content": content} for role, content in messages]})
        return str(answer["prompt"])

    def tokenize(self, text: str) -> list[int]:
        return list(self.get_json("/tokenize", {"content": text, "add_special": False})["tokens"])

    def stream(self, body: dict[str, Any]) -> Generator[dict[str, Any], None, None]:
        """POST /completion with `stream` on; each chunk as the server sent it, up to the one
        that says it stopped (a stream that ends before it: ServerError). Closing the
        generator closes the connection, which stops the server's generation."""
        conn, response = self._request("POST", "/completion", {**body, "stream": True})
        try:
            while True:
                try:
                    line = response.readline()
                except (OSError, http.client.HTTPException) as exc:
                    raise ServerError(f"llama-server at {self.url} stopped answering mid-reply "
                                      f"({_reason(exc)})") from None
                if not line:
                    raise ServerError(f"llama-server at {self.url} stopped answering mid-reply "
                                      "(it closed the connection)")
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    return
                chunk = json.loads(payload)
                if "error" in chunk:
                    raise ServerError(f"llama-server at {self.url}: {_error_message(json.dumps(chunk))}")
                yield chunk
                if chunk.get("stop"):
                    return
        finally:
            conn.close()


def _stem(name: str) -> str:
    """A model's name as specchat shows local ones: the file name without folder and .gguf."""
    return name.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".gguf")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout | TimeoutError):
        return "no answer in time"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _error_message(text: str) -> str:
    """The message of a llama-server error body ({"error": {"message": …}}), else the text."""
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        return text.strip()[:200]
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)
