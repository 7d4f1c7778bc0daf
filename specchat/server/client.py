"""A client of llama.cpp's own server (`llama-server -m TARGET -md DRAFT`): its models, its chat
template, and a completion streamed token by token with the server's counters.

Plain `http.client`. The small requests (/v1/models, /slots, /apply-template, /tokenize) share
one keep-alive connection (opened again once when the server has closed it); a stream has a
connection of its own, read line by line as the server sends it (server-sent events,
`data: {json}`), and closing it is how a reply is stopped.

Nothing the server sends is trusted: every answer is checked for the fields and types the client
reads, and every stream chunk becomes a typed `Chunk` or a `ServerError` that names the server
and what it sent. A reply that stalls after its first token is ended after `between_tokens_s`
(the first token may take minutes on a CPU; the fiftieth may not).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from specchat.errors import SpecchatError

TIMEOUT_S = 600.0
"""No byte from the server for this long ends the request (a prompt of many thousand tokens
on a CPU takes minutes before its first token)."""
BETWEEN_TOKENS_S = 60.0
"""Once a reply's first token has come: no chunk for this long ends it."""
MAX_LINE = 4 << 20
"""The longest stream line read (4 MiB); a chunk of one token is a few hundred bytes."""


class ServerError(SpecchatError):
    """The server could not be reached, answered with an error, or sent what is not a
    llama-server's answer."""


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


@dataclass(frozen=True)
class Chunk:
    """One chunk of a streamed completion, checked."""

    content: str = ""
    tokens: tuple[int, ...] = ()
    tokens_predicted: int = 0
    """Tokens generated so far (never fewer than the chunk before said)."""
    draft_n: int = 0
    draft_n_accepted: int = 0
    """The server's cumulative draft counters (never running backwards)."""
    stop: bool = False
    stop_type: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    """The numeric fields of the chunk's `timings`."""


class ServerClient:
    def __init__(self, url: str, timeout_s: float = TIMEOUT_S,
                 between_tokens_s: float = BETWEEN_TOKENS_S) -> None:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            port = 0
        if parts.scheme not in ("http", "https") or not parts.hostname or not port:
            raise ServerError(f"--server {url!r} is not a URL like http://127.0.0.1:8080")
        self.url = f"{parts.scheme}://{parts.netloc}"
        self.host, self.port = parts.hostname, port
        self.https = parts.scheme == "https"
        self.timeout_s, self.between_tokens_s = timeout_s, between_tokens_s
        self._kept: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        self.connections = 0
        """Connections opened so far (the keep-alive one counts once while it lasts)."""

    def connect(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        self.connections += 1
        return kind(self.host, self.port, timeout=self.timeout_s)

    def close(self) -> None:
        with self._lock:
            if self._kept is not None:
                self._kept.close()
                self._kept = None

    def _failed(self, what: str, exc: BaseException) -> ServerError:
        return ServerError(f"llama-server at {self.url} {what} ({_reason(exc)})")

    def _send(self, conn: http.client.HTTPConnection, method: str, path: str,
              body: dict[str, Any] | None) -> tuple[http.client.HTTPResponse, socket.socket]:
        """The response, and the socket it is read from (the connection lets go of it when
        the server says it will close)."""
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json"} if data else {})
        sock = conn.sock
        assert sock is not None
        return conn.getresponse(), sock

    def _check_status(self, path: str, response: http.client.HTTPResponse) -> None:
        if response.status != 200:
            text = response.read(64 << 10).decode(errors="replace")
            raise ServerError(f"llama-server at {self.url} answered {path} with {response.status}: "
                              f"{_error_message(text)}")

    def get_json(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """A small request on the kept connection; its answer parsed (any JSON value)."""
        method = "POST" if body is not None else "GET"
        with self._lock:
            for attempt in (0, 1):
                fresh = self._kept is None
                conn = self._kept = self._kept or self.connect()
                try:
                    response, _ = self._send(conn, method, path, body)
                    self._check_status(path, response)
                    raw = response.read()
                    if response.will_close:
                        self._drop()
                    break
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                    self._drop()  # a keep-alive connection the server had closed: once more
                    if fresh or attempt:
                        raise self._failed("is not answering", exc) from None
                except ServerError:
                    self._drop()
                    raise
                except (OSError, http.client.HTTPException) as exc:
                    self._drop()
                    raise self._failed("is not answering", exc) from None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ServerError(f"llama-server at {self.url} sent no JSON for {path} "
                              f"({_sample(raw)}: {exc})") from None

    def _drop(self) -> None:
        if self._kept is not None:
            self._kept.close()
            self._kept = None

    def _object(self, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self._unexpected(path, f"a JSON {_kind(value)} where an object belongs")
        return value

    def _unexpected(self, path: str, what: str) -> ServerError:
        return ServerError(f"llama-server at {self.url} sent {what} for {path}: is it a "
                           "llama.cpp llama-server?")

    def models(self) -> ServerModels:
        answer = self._object(self.get_json("/v1/models"), "/v1/models")
        listed = answer.get("data")
        first = _dict(listed[0]) if isinstance(listed, list) and listed else {}
        meta = _dict(first.get("meta"))
        n_ctx = meta.get("n_ctx")
        n_ctx = n_ctx if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx > 0 \
            else None
        try:
            slots = self.get_json("/slots")
        except ServerError:
            slots = []  # started with --no-slots: it does not say
        slot = _dict(slots[0]) if isinstance(slots, list) and slots else {}
        params = _dict(slot.get("params"))
        types = [t for t in str(params.get("speculative.types", "")).split(",")
                 if t and t != "none"]
        speculation = (",".join(types) or "speculating") if slot.get("speculative") else None
        return ServerModels(_stem(str(first.get("id") or "?")), speculation, n_ctx)

    def render_chat(self, messages: list[tuple[str, str]]) -> str:
        """The prompt for `messages` in the server's own chat template."""
        answer = self._object(self.get_json("/apply-template", {
            "messages": [{"role": role, "content": content} for role, content in messages]}),
            "/apply-template")
        prompt = answer.get("prompt")
        if not isinstance(prompt, str):
            raise self._unexpected("/apply-template", "no prompt text")
        return prompt

    def tokenize(self, text: str) -> list[int]:
        answer = self._object(self.get_json("/tokenize", {"content": text, "add_special": False}),
                              "/tokenize")
        tokens = answer.get("tokens")
        if not isinstance(tokens, list) or not all(_is_int(t) and t >= 0 for t in tokens):
            raise self._unexpected("/tokenize", "no list of token ids")
        return tokens

    def read(self, prompt_ids: list[int]) -> tuple[int, float]:
        """The server reads a prompt into its cache and generates nothing (`n_predict` 0);
        returns the tokens it evaluated (what its cache did not hold) and the seconds it says
        that took."""
        answer = self._object(self.get_json("/completion", {
            "prompt": prompt_ids, "n_predict": 0, "cache_prompt": True}), "/completion")
        timings = _dict(answer.get("timings"))
        n, ms = timings.get("prompt_n"), timings.get("prompt_ms")
        if not isinstance(n, int | float) or not isinstance(ms, int | float):
            raise self._unexpected("/completion", "no prompt timings")
        return int(n), ms / 1000

    def stream(self, body: dict[str, Any]) -> Generator[Chunk, None, None]:
        """POST /completion with `stream` on; each chunk checked, up to the one that says it
        stopped (a stream that ends before it: ServerError). Closing the generator closes the
        connection, which stops the server's generation."""
        conn = self.connect()
        try:
            try:
                response, sock = self._send(conn, "POST", "/completion",
                                            {**body, "stream": True})
            except (OSError, http.client.HTTPException) as exc:
                raise self._failed("is not answering", exc) from None
            self._check_status("/completion", response)
            last = Chunk()
            while True:
                line = self._line(response)
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    return
                chunk = self._chunk(payload, last)
                if chunk.tokens_predicted > 0 and last.tokens_predicted == 0:
                    sock.settimeout(self.between_tokens_s)  # the first token has come
                last = chunk
                yield chunk
                if chunk.stop:
                    return
        finally:
            conn.close()

    def _line(self, response: http.client.HTTPResponse) -> bytes:
        try:
            line = response.readline(MAX_LINE + 1)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise self._failed("stopped answering mid-reply", exc) from None
        if not line:
            raise ServerError(f"llama-server at {self.url} stopped answering mid-reply "
                              "(it closed the connection before its last chunk)")
        if len(line) > MAX_LINE:
            raise ServerError(f"llama-server at {self.url} sent a stream line over "
                              f"{MAX_LINE >> 20} MiB mid-reply")
        return line.strip()

    def _chunk(self, payload: bytes, last: Chunk) -> Chunk:
        """A chunk checked against the one before it."""
        where = "/completion"
        try:
            raw = json.loads(payload)
        except ValueError as exc:
            raise ServerError(f"llama-server at {self.url} sent a stream chunk that is not JSON "
                              f"({_sample(payload)}: {exc})") from None
        raw = self._object(raw, where)
        if "error" in raw:
            raise ServerError(f"llama-server at {self.url}: {_error_message(json.dumps(raw))}")
        timings = raw.get("timings") if raw.get("timings") is not None else {}
        if not isinstance(timings, dict):
            raise self._unexpected(where, f"timings as a JSON {_kind(timings)}")
        tokens = raw.get("tokens") if raw.get("tokens") is not None else []
        counts = {name: value for name, value in (
            ("tokens_predicted", raw.get("tokens_predicted", last.tokens_predicted)),
            ("draft_n", timings.get("draft_n", last.draft_n)),
            ("draft_n_accepted", timings.get("draft_n_accepted", last.draft_n_accepted)))}
        content = raw.get("content") if raw.get("content") is not None else ""
        if not isinstance(content, str) or not isinstance(tokens, list) or not all(
                _is_int(t) for t in tokens) or not all(_is_int(v) for v in counts.values()):
            raise self._unexpected(where, "a chunk with fields of the wrong type")
        chunk = Chunk(content, tuple(tokens), counts["tokens_predicted"], counts["draft_n"],
                      counts["draft_n_accepted"], bool(raw.get("stop")),
                      str(raw.get("stop_type") or ""),
                      {k: float(v) for k, v in timings.items()
                       if isinstance(v, int | float) and not isinstance(v, bool)})
        if (chunk.tokens_predicted < last.tokens_predicted or chunk.draft_n < last.draft_n
                or chunk.draft_n_accepted < last.draft_n_accepted
                or chunk.draft_n_accepted > chunk.draft_n):
            raise self._unexpected(where, "counters that run backwards (tokens "
                                   f"{last.tokens_predicted} -> {chunk.tokens_predicted}, drafts "
                                   f"{last.draft_n_accepted}/{last.draft_n} -> "
                                   f"{chunk.draft_n_accepted}/{chunk.draft_n})")
        if chunk.content and chunk.tokens_predicted == last.tokens_predicted and not chunk.stop:
            raise self._unexpected(where, "text without the token count it needs "
                                   "(tokens_predicted)")
        return chunk


def _dict(value: Any) -> dict[str, Any]:
    """`value` where it is an object, else an empty one (for fields that may be left out)."""
    return value if isinstance(value, dict) else {}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def _sample(raw: bytes) -> str:
    """The start of what the server sent, printable."""
    text = raw[:60].decode(errors="replace")
    return repr(text + ("…" if len(raw) > 60 else ""))


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
        return str(error.get("message") or error)[:200]
    return str(error)[:200]
