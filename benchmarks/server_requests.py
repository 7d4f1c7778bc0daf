"""Requests and connections a turn on a llama-server costs the client, and the time before its
first token: `python -m benchmarks.server_requests URL [--turns N]` (counts every
http.client connection and request this process makes, per turn of one conversation)."""

from __future__ import annotations

import http.client
import statistics
import time

from benchmarks import arguments
from specchat.engine.events import TokenEvent
from specchat.engine.loop import GenerationSettings
from specchat.engine.sampling import SamplingParams
from specchat.server.client import ServerClient
from specchat.server.session import ServerSession

COUNTS = {"connections": 0, "requests": 0}


def _counting(name: str, original):
    def counted(self, *args, **kwargs):
        COUNTS[name] += 1
        return original(self, *args, **kwargs)
    return counted


def main() -> int:
    ap = arguments.parser(__doc__, None, repeats=5)
    ap.add_argument("url")
    args = ap.parse_args()
    http.client.HTTPConnection.connect = _counting(  # type: ignore[method-assign]
        "connections", http.client.HTTPConnection.connect)
    http.client.HTTPConnection.request = _counting(  # type: ignore[method-assign]
        "requests", http.client.HTTPConnection.request)
    session = ServerSession(ServerClient(args.url), SamplingParams(temperature=0.0))
    print(f"connect: {COUNTS['requests']} requests on {COUNTS['connections']} connections")
    before_first = []
    for i in range(args.repeats):
        COUNTS.update(connections=0, requests=0)
        t0 = time.perf_counter()
        first = None
        for event in session.turn(f"Say {i} in one word.", GenerationSettings(max_tokens=8,
                                                                                baseline_steps=0)):
            if first is None and isinstance(event, TokenEvent):
                first = time.perf_counter() - t0
        before_first.append((first or 0.0) * 1000)
        print(f"turn {i + 1}: {COUNTS['requests']} requests on {COUNTS['connections']} "
              f"connections, first token after {before_first[-1]:.1f} ms")
    print(f"median time before the first token: {statistics.median(before_first):.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
