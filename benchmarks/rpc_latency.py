"""Speculation against network distance: the target's layers on an RPC server behind an added
round-trip delay (a benchmark, not a test; needs root for the network namespace).

Where the kernel has netem, the script makes a network namespace with a veth pair (10.77.0.1
here, 10.77.0.2 there), starts `specchat rpc-server` inside it and puts half the delay on each
end with `tc netem`. Where it has none (`Specified qdisc kind is unknown`), the server runs on
loopback and a TCP relay between client and server holds every chunk half the delay in each
direction (every row, 0 ms too, goes through it, so they share its overhead). Traffic stays
inside this machine; what the script made is removed at the end. The target (the default
pair's 1.5B unless --target) loads once; the drafts run here. For each delay every arm decodes
each prompt from empty caches, arms back to back in a rotating order, `--repeats` times.
Reported, as medians: decode tok/s, target passes, the speedup against the target-only run
next to it, and the speedup the engine's cost model predicted before each round ran (its
expected tokens over its expected seconds, against that target-only run).

    sudo .venv/bin/python -m benchmarks.rpc_latency --delays 0,1,5,20 --out docs/rpc.md
"""

from __future__ import annotations

import queue
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from benchmarks import arguments
from benchmarks.tools import publish
from specchat.backends.rpc import wait_for
from specchat.bench.runner import load_prompts
from specchat.chat.session import ChatSession
from specchat.engine.events import turn_of
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.sampling import SamplingParams
from specchat.loading import load_drafter, load_target

NS, HOST_IF, NS_IF = "specchat-rpc", "scrpc0", "scrpc1"
HOST_IP, NS_IP, PORT = "10.77.0.1", "10.77.0.2", 50052
ARMS = [("target only", "none", DraftSettings(k=1)),
        ("0.5B draft k=3", "default", DraftSettings(k=3)),
        ("0.5B draft adaptive k<=8", "default", DraftSettings(k=8, adaptive=True)),
        ("n-gram adaptive k<=8", "ngram", DraftSettings(k=8, adaptive=True))]


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True)


def start_server(prefix: list[str], host: str, threads: int, port: int = PORT
                 ) -> subprocess.Popen:
    """`specchat rpc-server` (run under `prefix`, such as `ip netns exec NS`), once it answers."""
    server = subprocess.Popen(
        [*prefix, sys.executable, "-m", "specchat", "rpc-server", "--host", host, "--port",
         str(port), "--threads", str(threads), *(["--expose"] if prefix else [])],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert server.stdout is not None
    print(server.stdout.readline().strip(), flush=True)
    wait_for(f"{host}:{port}")
    return server


@contextmanager
def remote_server(threads: int) -> Iterator[tuple[str, DelayRelay | None]]:
    """(the endpoint to use, the relay if the delay comes from one): the server in the
    namespace behind the veth pair where netem can delay it, else on loopback behind a relay.
    Everything made is removed on the way out."""
    subprocess.run(["ip", "netns", "del", NS], stderr=subprocess.DEVNULL)
    sh("ip", "netns", "add", NS)
    server = None
    try:
        sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
        sh("ip", "link", "set", NS_IF, "netns", NS)
        sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", HOST_IF)
        sh("ip", "link", "set", HOST_IF, "up")
        sh("ip", "netns", "exec", NS, "ip", "addr", "add", f"{NS_IP}/24", "dev", NS_IF)
        sh("ip", "netns", "exec", NS, "ip", "link", "set", NS_IF, "up")
        sh("ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up")
        if netem_available():
            server = start_server(["ip", "netns", "exec", NS], NS_IP, threads)
            yield f"{NS_IP}:{PORT}", None
        else:
            server = start_server([], "127.0.0.1", threads)
            relay = DelayRelay(("127.0.0.1", PORT))
            yield relay.endpoint, relay
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", HOST_IF], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", NS], stderr=subprocess.DEVNULL)


def netem_available() -> bool:
    ok = subprocess.run(["tc", "qdisc", "replace", "dev", HOST_IF, "root", "netem", "delay",
                         "0ms"], capture_output=True).returncode == 0
    if ok:
        sh("tc", "qdisc", "del", "dev", HOST_IF, "root")
    return ok


def set_delay(rtt_ms: float, relay: DelayRelay | None) -> None:
    """Half the round trip on each end of the veth pair (or each direction of the relay)."""
    if relay is not None:
        relay.delay_s = rtt_ms / 2000
        return
    half = f"{rtt_ms / 2:g}ms"
    sh("tc", "qdisc", "replace", "dev", HOST_IF, "root", "netem", "delay", half)
    sh("ip", "netns", "exec", NS, "tc", "qdisc", "replace", "dev", NS_IF, "root", "netem",
       "delay", half)


class DelayRelay:
    """A TCP relay on loopback that forwards to the server and holds each chunk `delay_s` in
    each direction before passing it on (order kept)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.delay_s = target, 0.0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self.listener.accept()
            server = socket.create_connection(self.target)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for a, b in ((client, server), (server, client)):
                held: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()
                threading.Thread(target=self._take, args=(a, held), daemon=True).start()
                threading.Thread(target=self._give, args=(b, held), daemon=True).start()

    def _take(self, sock: socket.socket, held: queue.SimpleQueue) -> None:
        while data := sock.recv(1 << 20):
            held.put((time.perf_counter() + self.delay_s, data))
        held.put((0.0, b""))

    @staticmethod
    def _give(sock: socket.socket, held: queue.SimpleQueue) -> None:
        while True:
            due, data = held.get()
            if not data:
                sock.shutdown(socket.SHUT_WR)
                return
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            sock.sendall(data)


def main() -> int:
    ap = arguments.parser(__doc__, repeats=2, tokens=64, out=None)
    ap.add_argument("--delays", default="0,1,5,20", help="added round trips in ms")
    ap.add_argument("--prompts", type=int, default=2, help="prompts from the suite's code set")
    ap.add_argument("--server-threads", type=int, default=1)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still remove the namespace
    settings = arguments.settings(args)
    delays = [float(d) for d in args.delays.split(",")]
    prompts = load_prompts(categories=["code"])[: args.prompts]
    generation = GenerationSettings(max_tokens=args.tokens)
    rows: dict[tuple[float, str], list[tuple[float, int, float | None]]] = {}
    with remote_server(args.server_threads) as (endpoint, relay):
        settings.models.rpc = endpoint
        how = ("netem on a veth pair into a network namespace" if relay is None else
               "a delaying TCP relay on loopback (no netem in this kernel)")
        t0 = time.perf_counter()
        target = load_target(settings.models.target, settings.models)
        print(f"target on {settings.models.rpc}, loaded in {time.perf_counter() - t0:.1f} s",
              flush=True)
        greedy = SamplingParams()
        rng = np.random.default_rng(0)
        drafters = {spec: load_drafter(spec, target, greedy, rng, settings.models)
                    for spec in {spec for _, spec, _ in ARMS}}
        engines = {label: SpeculativeEngine(target, drafters[spec], greedy, draft)
                   for label, spec, draft in ARMS}
        for delay in delays:
            set_delay(delay, relay)
            for i, prompt in enumerate(prompts * args.repeats):
                labels = list(engines)
                shift = i % len(labels)  # each arm takes each place in the order in turn
                for label in labels[shift:] + labels[:shift]:
                    engine = engines[label]
                    engine.clear_caches()
                    turn = turn_of(ChatSession(engine).turn(prompt.text, generation))
                    rows.setdefault((delay, label), []).append(
                        (turn.tokens_per_second or 0.0, turn.target_passes,
                         turn.predicted_tokens_per_second))
                    print(f"rtt +{delay:g} ms {prompt.name:<14} {label:<26} "
                          f"{turn.tokens_per_second or 0:6.2f} tok/s, {turn.target_passes} "
                          "target passes", flush=True)
        for drafter in drafters.values():
            drafter.close()
        target.close()
    lines = [f"Target ({target.name}) on `specchat rpc-server`, delay by {how}, drafts here; "
             f"{len(prompts)} code prompts x {args.repeats} repeats x {args.tokens} tokens, greedy, "
             "medians; "
             "`python -m benchmarks.rpc_latency`:",
             "", "| added round trip | arm | tok/s | target passes | speedup | predicted "
             "speedup |", "|---|---|---|---|---|---|"]
    for delay in delays:
        base = [r[0] for r in rows[(delay, "target only")]]
        for label, _, _ in ARMS:
            runs = rows[(delay, label)]
            speedup = statistics.median(r[0] / b for r, b in zip(runs, base))
            predicted = [r[2] / b for r, b in zip(runs, base) if r[2]]
            guess = f"{statistics.median(predicted):.2f}x" if predicted and label != \
                "target only" else "–"
            lines.append(f"| {delay:g} ms | {label} | {statistics.median(r[0] for r in runs):.2f}"
                         f" | {statistics.median(r[1] for r in runs):.0f} | {speedup:.2f}x | "
                         f"{guess} |")
    publish("\n".join(lines), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
