"""`specchat bench`: the prompt suite through target-only and each chosen drafter and k."""

from __future__ import annotations

import argparse
import platform
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import numpy as np
from rich.console import Console

from specchat import settings as settings_schema
from specchat.bench.runner import Remote
from specchat.choices import DraftChoice
from specchat.engine.backend import Backend
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import Event
from specchat.engine.loop import DraftSettings, GenerationSettings
from specchat.engine.policy import PolicyKind, TreeSettings
from specchat.engine.sampling import SamplingParams
from specchat.errors import SpecchatError
from specchat.loading import speculative_engine, warm_up
from specchat.settings import Settings
from specchat.tables import table_console


def add_parser(sub, defaults: Settings) -> argparse.ArgumentParser:
    p = sub.add_parser("bench", help="benchmark drafters and draft lengths on a prompt suite")
    settings_schema.add_arguments(p, defaults, sections=("models",), skip=("draft",))
    p.add_argument("--prompts", type=Path, default=None,
                   help="a prompts file ([[prompt]] category, name, text); default: built-in suite")
    p.add_argument("--categories", default="", help="comma-separated categories to run")
    p.add_argument("--drafters", default="default,ngram",
                   help="comma-separated drafters as --draft takes them (default: %(default)s)")
    p.add_argument("--k", default="2,3,4", help="fixed draft lengths to run (default: %(default)s)")
    p.add_argument("--guarded", action="store_true",
                   help="also run each drafter with the guarded policy (the default) at each --k")
    p.add_argument("--adaptive", action="store_true",
                   help="also run each drafter with the adaptive policy")
    p.add_argument("--k-max", type=int, default=8, help="the adaptive policy's longest draft")
    p.add_argument("--tree", action="store_true",
                   help="also run each drafter's arms drafting trees, beside its chains")
    p.add_argument("--tree-nodes", type=int, default=TreeSettings().nodes,
                   help="the tree arms' alternatives a round, at most (default: %(default)s)")
    p.add_argument("--baseline-target", default=None, metavar="MODEL",
                   help="also run this target alone from the same prompts (say, the shipped file "
                        "beside its optimized layout) and report every arm's speedup against it")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=None,
                   help="tokens per reply for every prompt (default: each prompt's own, else 96)")
    p.add_argument("--out", type=Path, default=Path("bench-results"),
                   help="folder for bench.json, bench.csv and bench.svg (default: %(default)s)")
    return p


def run(args: argparse.Namespace) -> int:
    from specchat.bench import chart, report
    from specchat.bench.runner import Arm, load_prompts, run_suite
    from specchat.loading import load_drafter, load_target, one_draft_model_on_servers

    console, err = table_console(), Console(stderr=True)
    categories = [c for c in args.categories.split(",") if c]
    prompts = load_prompts(args.prompts, categories)
    ks = [int(k) for k in args.k.split(",") if k]
    try:
        drafters = [DraftChoice.parse(d) for d in args.drafters.split(",") if d]
    except ValueError as exc:
        raise SpecchatError(f"--drafters: {exc}") from None
    arms = [Arm(DraftChoice())]
    for d in drafters:
        chains = [DraftSettings(k=k) for k in ks]
        if args.guarded:
            chains += [DraftSettings(k=k, policy_kind=PolicyKind.GUARDED) for k in ks]
        if args.adaptive:
            chains.append(DraftSettings(k=args.k_max, policy_kind=PolicyKind.ADAPTIVE))
        arms += [Arm(d, s) for s in chains]
        if args.tree:
            tree = TreeSettings(nodes=args.tree_nodes)
            arms += [Arm(d, replace(s, tree=tree)) for s in chains]
    options = settings_schema.from_args(args, skip=("draft",)).models
    one_draft_model_on_servers(options, drafters)
    err.print(f"loading {options.target} and drafters {', '.join(map(str, drafters))} …", style="dim")
    target = load_target(options.target, options)
    rng = np.random.default_rng(0)
    loaded = {choice: load_drafter(choice, target, SamplingParams(), rng, options)
              for choice in dict.fromkeys(a.drafter for a in arms)}

    def progress(done: int, total: int, r) -> None:
        rate = "–" if r.tokens_per_second is None else f"{r.tokens_per_second:.1f}"
        err.print(f"[{done}/{total}] {r.category}/{r.prompt} · {r.arm}: {r.tokens} tokens, "
                  f"{rate} tok/s", style="dim", highlight=False)

    remote: dict[str, Remote] = {}
    if options.server:
        from specchat.server.session import ServerSession

        greedy = SamplingParams()  # each prompt evaluated whole, as the local arms do
        server = ServerSession.connect(options.server, options.baseline_server, greedy,
                                       cache_prompt=False)
        # from the prompt ids the local arms get (the server's own template may differ: Qwen's
        # adds a system message); its turns measure the speedup against the baseline server
        remote[f"llama-server ({server.models.speculation or 'no draft'})"] = server.generate
        if options.baseline_server:
            remote["llama-server, no draft"] = ServerSession.connect(
                options.baseline_server, None, greedy, cache_prompt=False).generate
    yardstick = None
    if args.baseline_target:
        other = load_target(args.baseline_target, options)
        yardstick = f"target only ({other.name})"
        remote[yardstick] = alone(other)
    runs = run_suite(target, loaded, arms, prompts, args.repeats, args.max_tokens, progress,
                     remote)
    summaries = report.summarize(runs)
    title = (f"{target.name} · {len(prompts)} prompts × {args.repeats} repeats · greedy · "
             f"{platform.machine()}")
    for table in report.rich_tables(summaries, title):
        console.print(table)
    console.print(chart.terminal_chart(summaries))
    against = report.summarize(runs, yardstick) if yardstick else []
    if yardstick:
        console.print(report.yardstick_table(against, yardstick))
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"target": target.name, "arms": [a.label for a in arms] + list(remote),
            "server": options.server,
            "prompts": [f"{p.category}/{p.name}" for p in prompts], "repeats": args.repeats,
            "max_tokens": args.max_tokens, "machine": platform.platform(),
            "processor": platform.processor()}
    meta["yardstick"] = yardstick
    report.write_json(args.out / "bench.json", meta, runs, summaries, against)
    report.write_csv(args.out / "bench.csv", summaries)
    chart.write_svg(args.out / "bench.svg", summaries, title)
    err.print(f"wrote {args.out / 'bench.json'}, bench.csv and bench.svg", style="dim")
    return 0


def alone(target: Backend) -> Remote:
    """Another target without a draft, as an arm beside the local ones (warmed up first):
    each prompt from empty caches, no baseline steps (it is a baseline)."""
    engine = speculative_engine(target, NoDrafter(), SamplingParams())
    warm_up(engine, 4)

    def generate(ids: list[int], settings: GenerationSettings) -> Iterable[Event]:
        engine.clear_caches()
        return engine.generate(ids, replace(settings, baseline_steps=0))
    return generate
