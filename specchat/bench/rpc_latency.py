"""Speculation against network distance: the target's layers on an RPC server behind an added
round-trip delay (a benchmark, not a test; needs root for the network namespace).

The script makes a network namespace with a veth pair (10.77.0.1 here, 10.77.0.2 there),
starts `specchat rpc-server` inside it, and puts half the delay on each end with `tc netem`,
so the round trip gets the whole of it; traffic stays inside this machine, and the namespace
and the veth pair are removed at the end. The target (the default pair's 1.5B unless
--target) loads once with --rpc 10.77.0.2:50052; the drafts run here. For each delay every arm
decodes the prompts from empty caches, back to back. Reported: decode tok/s, target passes,
the speedup against target-only at the same delay, and what the engine's cost model predicted
before each round ran (its expected tokens over its expected seconds, against target-only).

    sudo .venv/bin/python -m specchat.bench.rpc_latency --delays 0,1,5,20 --out docs/rpc.md
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from specchat import settings as schema
from specchat.bench.runner import load_prompts
from specchat.bench.tools import publish
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


@contextmanager
def remote_namespace(threads: int) -> Iterator[subprocess.Popen]:
    """The namespace, the veth pair and the server in it; all removed on the way out."""
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
        server = subprocess.Popen(
            ["ip", "netns", "exec", NS, sys.executable, "-m", "specchat", "rpc-server",
             "--host", NS_IP, "--port", str(PORT), "--expose", "--threads", str(threads)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert server.stdout is not None
        print(server.stdout.readline().strip(), flush=True)
        yield server
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", HOST_IF], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", NS], stderr=subprocess.DEVNULL)


def set_delay(rtt_ms: float) -> None:
    """Half the round trip on each end of the veth pair."""
    half = f"{rtt_ms / 2:g}ms"
    sh("tc", "qdisc", "replace", "dev", HOST_IF, "root", "netem", "delay", half)
    sh("ip", "netns", "exec", NS, "tc", "qdisc", "replace", "dev", NS_IF, "root", "netem",
       "delay", half)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delays", default="0,1,5,20", help="added round trips in ms")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=2, help="prompts from the suite's code set")
    ap.add_argument("--server-threads", type=int, default=1)
    ap.add_argument("--out", type=Path, help="also write the table into this doc")
    schema.add_arguments(ap, schema.Settings(), sections=("models",))
    args = ap.parse_args()
    settings = schema.from_args(args)
    delays = [float(d) for d in args.delays.split(",")]
    prompts = load_prompts(categories=["code"])[: args.prompts]
    generation = GenerationSettings(max_tokens=args.tokens)
    rows: dict[tuple[float, str], list[tuple[float, int, float | None]]] = {}
    with remote_namespace(args.server_threads):
        settings.models.rpc = f"{NS_IP}:{PORT}"
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
            set_delay(delay)
            for prompt in prompts:
                for label, engine in engines.items():
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
    lines = [f"Target ({target.name}) on `specchat rpc-server` in a network namespace, drafts "
             f"here; {len(prompts)} code prompts x {args.tokens} tokens, greedy; "
             "`python -m specchat.bench.rpc_latency`:",
             "", "| added round trip | arm | tok/s | target passes | speedup | predicted "
             "speedup |", "|---|---|---|---|---|---|"]
    for delay in delays:
        base = statistics.median(r[0] for r in rows[(delay, "target only")])
        for label, _, _ in ARMS:
            runs = rows[(delay, label)]
            rate = statistics.median(r[0] for r in runs)
            predicted = [r[2] for r in runs if r[2]]
            guess = f"{statistics.median(predicted) / base:.2f}x" if predicted and label != \
                "target only" else "–"
            lines.append(f"| {delay:g} ms | {label} | {rate:.2f} | "
                         f"{statistics.median(r[1] for r in runs):.0f} | {rate / base:.2f}x | "
                         f"{guess} |")
    publish("\n".join(lines), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
