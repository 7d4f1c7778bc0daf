"""One tab of a room against `specchat ask`: the speedup a reply shows when the room's
llama-server speculates, beside the speedup specchat's own engine shows on the same pair,
prompts and machine, side by side in one run (a benchmark, not a test).

The room is `specchat room`'s pair of servers (the pair speculating with --slots tabs, the
target alone beside it), started as `specchat llama-server --baseline` starts them, with any
llama-server flags after `--`. Each repeat runs every prompt both ways back to back, in a
rotating order: the room's reply through ServerSession (its speedup measured against the
target-alone server continuing the reply, as a tab's is), and the local engine's (its speedup
against target-only steps timed inside the reply, as `ask`'s is). Reported per category: both
speedups and decode rates (medians), the room's speedup over ask's (the median of per-repeat
ratios), and both acceptances.

    .venv/bin/python -m benchmarks.room_vs_ask --repeats 3 --tokens 128 --k 3 \\
        --categories code,long -- --some-llama-server-flag
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks import arguments
from benchmarks.tools import machine_line, publish
from specchat import local_server
from specchat.bench.runner import load_prompts
from specchat.engine.backend import user_turn
from specchat.engine.events import TurnEvent, turn_of
from specchat.engine.loop import GenerationSettings
from specchat.errors import SpecchatError
from specchat.loading import build_engine, warm_up
from specchat.native import llama_tools, model_thread
from specchat.server.session import ServerSession

PORTS = range(8091, 8191, 2)
"""Where the room's two servers may listen (the first free pair of ports)."""


def free_ports() -> int:
    for port in PORTS:
        try:
            local_server.port_free("127.0.0.1", port)
            local_server.port_free("127.0.0.1", port + 1)
        except SpecchatError:
            continue
        return port
    raise SystemExit(f"no two free ports in {PORTS.start}-{PORTS.stop}")


@dataclass
class Arm:
    speedups: list[float]
    rates: list[float]
    acceptances: list[float]

    def add(self, turn: TurnEvent) -> None:
        if turn.counts.speedup is None or turn.counts.tokens_per_second is None:
            raise SystemExit(f"a reply had no speedup ({turn.counts.baseline_source}, "
                             f"{turn.counts.n_tokens} tokens, stop: {turn.stop_reason})")
        self.speedups.append(turn.counts.speedup)
        self.rates.append(turn.counts.tokens_per_second)
        self.acceptances.append(turn.counts.acceptance_rate or 0.0)


def main() -> int:
    ap = arguments.parser(__doc__, arguments.CPU_ONLY, repeats=3, tokens=128, k=3,
                          categories="code,long", out=None)
    ap.add_argument("--slots", type=int, default=8, help="the room's tabs (default: %(default)s)")
    ap.add_argument("server_flags", nargs="*", metavar="-- FLAGS",
                    help="more llama-server flags, for both servers")
    args = ap.parse_args()
    settings = arguments.settings(args)
    settings.draft = replace(settings.draft, k=args.k, policy="fixed")
    options = settings.models
    model_thread.adopt()
    binary, version = llama_tools.find_server(lambda done: None)
    port = free_ports()
    plan = local_server.plan(binary, options.target, options.draft, args.k, args.slots,
                             options.n_ctx, "127.0.0.1", port, False, options.threads,
                             tuple(args.server_flags))
    servers, _ = local_server.start_pair(plan, True, Path(tempfile.mkdtemp(prefix="room-vs-ask-")))
    try:
        engine = build_engine(settings)
        greedy = engine.sampling
        session = ServerSession.connect(plan.url(port), plan.url(port + 1), greedy,
                                        cache_prompt=False)
        generation = GenerationSettings(max_tokens=args.tokens,
                                        baseline_steps=settings.sampling.baseline_steps)
        prompts = load_prompts(None, arguments.categories(args))
        warm_up(engine)
        turn_of(session.generate(session.render([("user", "Say hello.")]),
                                 GenerationSettings(max_tokens=8)))
        arms = {(p.category, side): Arm([], [], []) for p in prompts for side in ("room", "ask")}
        for r in range(args.repeats):
            for p in prompts:
                ids = user_turn(engine.target, p.text)
                order = ("room", "ask") if r % 2 == 0 else ("ask", "room")
                for side in order:
                    if side == "ask":
                        engine.clear_caches()
                        turn = turn_of(engine.generate(ids, generation))
                    else:
                        turn = turn_of(session.generate(session.render([("user", p.text)]),
                                                        generation))
                    arms[p.category, side].add(turn)
                print(f"repeat {r + 1}/{args.repeats} {p.name}: room "
                      f"{arms[p.category, 'room'].speedups[-1]:.2f}x, ask "
                      f"{arms[p.category, 'ask'].speedups[-1]:.2f}x", file=sys.stderr)
    finally:
        servers.stop()

    med = statistics.median
    rows = []
    for category in dict.fromkeys(p.category for p in prompts):
        room, ask = arms[category, "room"], arms[category, "ask"]
        ratio = med(a / b for a, b in zip(room.speedups, ask.speedups, strict=True))
        rows.append(f"| {category} | {med(ask.speedups):.2f}x | {med(room.speedups):.2f}x | "
                    f"{ratio:.3f} | {med(ask.rates):.1f} / {med(room.rates):.1f} | "
                    f"{med(ask.acceptances):.0%} / {med(room.acceptances):.0%} |")
    flags = " ".join(args.server_flags) or "none"
    table = "\n".join([
        f"{machine_line()}. {plan.target.name} + {plan.draft.name if plan.draft else '-'}, "
        f"k={args.k} fixed, greedy, {args.tokens} tokens, llama-server {version} with "
        f"{args.slots} slots, extra flags: {flags}; {args.repeats} interleaved repeats (medians; "
        "the ratio is the median of per-repeat ratios).",
        "",
        "| prompts | `ask` speedup | room tab speedup | room / ask | decode tok/s (ask / room) "
        "| acceptance (ask / room) |",
        "|---|---|---|---|---|---|",
        *rows,
    ])
    publish(table, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
