"""What running a model on RPC servers from a child process costs per pass (a benchmark, not
a test).

specchat drives a model whose layers are on RPC servers from a child process
(backends/isolated.py), so a server that dies costs a turn and not the app. Each pass then
crosses the process boundary twice: the tokens out over a socket pair, the logits rows back
through a shared memory file (600 KB a row for Qwen's vocabulary). This measures that against
the same model driven in-process, side by side in one run: the default target on two loopback
`specchat rpc-server`s (a ggml server serves one client at a time), one driven in-process, one
from the child; blocks of passes alternate between them, and each pass is cut back off the
cache, so every pass runs at the same depth. Two servers on two cores make the side-by-side
times noisy, so the cost is also measured directly: the child times its own evaluation, and
the rest of the wall time of a pass is the process boundary's.

    .venv/bin/python -m benchmarks.isolation_cost --rows 1,4 --passes 10 --repeats 3
"""

from __future__ import annotations

import statistics
import time

from benchmarks import arguments
from benchmarks.rpc_latency import start_server
from specchat.backends.isolated import IsolatedBackend
from specchat.backends.llamacpp import LlamaCppBackend
from specchat.catalog.catalog import resolve_model
from specchat.engine.backend import Backend

PROMPT = "Write a Python function that parses a CSV line with quoted fields."


def pass_s(model: Backend, rows: int, n: int) -> tuple[list[float], list[float]]:
    """Seconds of `n` passes of `rows` tokens, each with all its logits rows (a verify pass
    of rows-1 draft tokens), each cut back off the cache afterwards; and, from a child, the
    seconds of each beyond the child's own evaluation."""
    depth, out, boundary = len(model.tokens), [], []
    for _ in range(n):
        child = model if isinstance(model, IsolatedBackend) else None
        child_s = child.child_s if child else 0.0
        t0 = time.perf_counter()
        model.eval([model.tokens[-1]] * rows, 0)
        out.append(time.perf_counter() - t0)
        if child:
            boundary.append(out[-1] - (child.child_s - child_s))
        model.truncate(depth)
    return out, boundary


def main() -> None:
    ap = arguments.parser(__doc__, repeats=3)
    ap.add_argument("--rows", default="1,4", help="tokens per pass, each with its logits row")
    ap.add_argument("--passes", type=int, default=10, help="passes per block")
    ap.add_argument("--server-threads", type=int, default=1, help="threads of each server")
    args = ap.parse_args()
    path = resolve_model(arguments.settings(args).models.target, "target")
    servers = [start_server([], "127.0.0.1", args.server_threads, port) for port in (50131, 50132)]
    models: dict[str, Backend] = {}
    try:
        models["in-process"] = LlamaCppBackend(path, n_ctx=1024, rpc="127.0.0.1:50131")
        models["child process"] = IsolatedBackend(path, rpc="127.0.0.1:50132", n_ctx=1024)
        for model in models.values():
            ids = model.tokenize(PROMPT, special=False)
            model.eval(ids, len(ids) - 1)
            pass_s(model, 1, 2)  # warm
        print(f"{path.stem} on loopback `specchat rpc-server`s ({args.server_threads} thread each), "
              f"{args.repeats} x {args.passes} passes per cell, medians; "
              "`python -m benchmarks.isolation_cost`:\n")
        print("| tokens (logits rows) a pass | in-process ms | child process ms | child / "
              "in-process | process boundary ms (median, max) |")
        print("|---|---|---|---|---|")
        for rows in (int(r) for r in args.rows.split(",")):
            times: dict[str, list[float]] = {name: [] for name in models}
            boundary: list[float] = []
            for _ in range(args.repeats):
                for name, model in models.items():
                    took, crossing = pass_s(model, rows, args.passes)
                    times[name] += took
                    boundary += crossing
            here, child = (statistics.median(times[n]) * 1000 for n in models)
            print(f"| {rows} | {here:.1f} | {child:.1f} | {child / here:.3f} | "
                  f"{statistics.median(boundary) * 1000:.2f}, {max(boundary) * 1000:.2f} |",
                  flush=True)
    finally:
        for model in models.values():
            model.close()
        for server in servers:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
