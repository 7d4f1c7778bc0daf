"""What a one-token request costs a llama-server: why a speculating server cannot give its own
target-only baseline (docs/server.md). Each request continues the same reply by one token, so
the server evaluates exactly one new token; its own `prompt_ms` is that step's time. On a server
with a draft model the step feeds the draft too.

    .venv/bin/python -m benchmarks.server_one_token http://127.0.0.1:8080 http://127.0.0.1:8081
"""

from __future__ import annotations

import statistics

from benchmarks import arguments
from specchat.server.client import ServerClient

REPLY = "def is_prime(n):\n    if n < 2:\n        return False\n"


def main() -> int:
    ap = arguments.parser(__doc__, None, repeats=6)
    ap.add_argument("urls", nargs="+", help="llama-servers to time, each in turn")
    args = ap.parse_args()
    for url in args.urls:
        client = ServerClient(url)
        prompt: list[int | str] = [*client.tokenize(client.render_chat(
            [("user", "Write a prime checker in Python.")])), REPLY]
        steps = []
        for i in range(args.repeats + 1):  # the first only brings the server's cache up
            answer = client.get_json("/completion", {
                "prompt": prompt, "n_predict": 1, "temperature": 0.0, "cache_prompt": True,
                "return_tokens": True})
            if i:
                steps.append(float(answer["timings"]["prompt_ms"]))
            prompt += answer["tokens"]
        print(f"{url}: one-token steps {' '.join(f'{s:.1f}' for s in steps)} ms, "
              f"median {statistics.median(steps):.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
