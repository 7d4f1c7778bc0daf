"""A real local HTTP server that answers like a llama-server, or like a broken or foreign one:
each path's answer is set by the test (status, body bytes, and for /completion a stream of
server-sent-event lines), so the real client is tried against any answer over a real socket."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    body: bytes
    status: int = 200
    content_type: str = "application/json"
    pause_s: float = 0.0
    """For a stream: seconds to wait after the first line (a server that stalls)."""


def as_json(value: Any) -> Answer:
    return Answer(json.dumps(value).encode())


def sse(*chunks: Any, done: bool = False) -> bytes:
    """Server-sent events: each chunk as a `data:` line (bytes are sent as they are)."""
    lines = [c if isinstance(c, bytes) else b"data: " + json.dumps(c).encode() for c in chunks]
    return b"".join(line + b"\n\n" for line in lines) + (b"data: [DONE]\n\n" if done else b"")


def good_reply(text: str = "hi there") -> bytes:
    """A two-token reply with one verify step (one draft proposed, one accepted)."""
    words = text.split(" ", 1)
    return sse({"content": words[0], "tokens": [5], "tokens_predicted": 1,
                "timings": {"draft_n": 0, "draft_n_accepted": 0}},
               {"content": " " + words[1], "tokens": [6], "tokens_predicted": 2,
                "timings": {"draft_n": 1, "draft_n_accepted": 1}},
               {"content": "", "tokens_predicted": 2, "stop": True, "stop_type": "eos",
                "timings": {"draft_n": 1, "draft_n_accepted": 1, "predicted_per_second": 9.5}})


def good_answers() -> dict[str, Answer]:
    return {
        "/v1/models": as_json({"data": [{"id": "tiny-target.gguf", "meta": {"n_ctx": 512}}]}),
        "/slots": as_json([{"speculative": True,
                            "params": {"speculative.types": "draft-simple"}}]),
        "/apply-template": as_json({"prompt": "<user>hi</user>"}),
        "/tokenize": as_json({"tokens": [1, 2, 3]}),
        "/completion": Answer(good_reply(), content_type="text/event-stream"),
    }


@dataclass
class AnsweringServer:
    answers: dict[str, Answer] = field(default_factory=good_answers)
    connections: int = 0
    requests: int = 0

    def __post_init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                owner.connections += 1

            def log_message(self, *args: Any) -> None:
                pass

            def answer(self) -> None:
                owner.requests += 1
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                got = owner.answers.get(self.path, Answer(b"not found", 404, "text/plain"))
                stream = self.path == "/completion" and got.status == 200
                self.send_response(got.status)
                self.send_header("Content-Type", got.content_type)
                if stream:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                else:
                    self.send_header("Content-Length", str(len(got.body)))
                self.end_headers()
                try:
                    if stream and got.pause_s:
                        first, _, rest = got.body.partition(b"\n\n")
                        self.wfile.write(first + b"\n\n")
                        self.wfile.flush()
                        time.sleep(got.pause_s)
                        self.wfile.write(rest)
                    else:
                        self.wfile.write(got.body)
                except OSError:
                    pass  # the client hung up: what a stopped or refused reply does

            do_GET = do_POST = answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
