"""`specchat tune`: what pays on this machine, measured, and the setting to use.

It times the target verifying 1..16 tokens and each draft model's pass (specchat.timing), then
runs a short calibration: one prompt per category of the suite (or the user's prompts),
target-only and each drafter at each k and with the adaptive policy, back to back from empty
caches. For every arm it sets the predicted speedup (fixed k: the expected accepted length at
the acceptance per position the calibration measured, over the round's cost from the timed
verify curve and a draft pass as it cost in the calibration's rounds; adaptive: the policy's
own predicted rate) beside the measured one (its decode rate over
target-only's on the same prompts), and recommends the arm that measured fastest, or no drafter
when none beat target-only by more than the noise margin. `--save` makes that the config
file's default.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from specchat import costs, cpu, timing
from specchat.bench.runner import Arm as BenchArm
from specchat.bench.runner import BenchRunner, Prompt, Run, load_prompts
from specchat.catalog.catalog import models_dir
from specchat.catalog.tuned import save_tuned
from specchat.choices import DraftChoice
from specchat.config import Config
from specchat.costs import conditional_rates
from specchat.engine.backend import Backend, user_turn
from specchat.engine.combined_drafter import CombinedDrafter
from specchat.engine.drafters import Drafter, NoDrafter
from specchat.engine.loop import DraftSettings
from specchat.engine.policy import PolicyKind, TreeSettings
from specchat.engine.sampling import SamplingParams
from specchat.engine.stats import paired_speedup_interval
from specchat.engine.text_drafter import TextDrafter
from specchat.errors import SpecchatError
from specchat.loading import speculative_engine, warm_up
from specchat.native.llama_tools import installed_build
from specchat.settings import Settings
from specchat.tables import table_console
from specchat.wording import speedup_text

KS = (1, 2, 3, 4, 6)
K_MAX = 8
MARGIN = 1.03
"""A drafter is recommended only if it measured this much faster than target-only."""
CALIBRATION_TOKENS = 48


@dataclass
class Tuned:
    """What the calibration measured of one arm: a row of tune's table and of tuned.toml."""

    draft: str
    """The drafter as `--draft` takes it."""
    k: int
    policy: PolicyKind
    predicted_speedup: float | None = None
    measured_speedup: float | None = None
    measured_low: float | None = None
    measured_high: float | None = None
    """The measured speedup's 95% interval, over the calibration prompts (paired bootstrap)."""
    acceptance: float | None = None
    tree: bool = False
    """Drafting trees (the adaptive policy's, engine/policy/branching.py)."""


def add_parser(sub: Any, defaults: Settings) -> argparse.ArgumentParser:
    from specchat import settings as schema

    p = sub.add_parser("tune", help="measure what pays on this machine and recommend a setting")
    schema.add_arguments(p, defaults, sections=("models",), skip=("draft",))
    p.add_argument("--draft", action="append", default=None, metavar="DRAFT",
                   help="a drafter to try, as --draft takes it (repeatable; default: default, "
                        "ngram, ngram+default, and each installed catalog model that drafts "
                        "as text for the target)")
    p.add_argument("--prompts", type=Path, default=None,
                   help="a prompts file ([[prompt]] category, name, text); default: the first "
                        "prompt of each category of the built-in suite")
    p.add_argument("--max-tokens", type=int, default=CALIBRATION_TOKENS)
    p.add_argument("--tree", action="store_true",
                   help="also try each drafter with draft trees (the adaptive policy's; a "
                        "draft that drafts as text drafts chains)")
    p.add_argument("--save", action="store_true", help="make the recommendation the default")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def default_drafts(target: str) -> list[DraftChoice]:
    """The default pair's draft, n-gram lookup and both combined, and each installed catalog
    model with another vocabulary that drafts as text for `target` (engine/text_drafter.py)."""
    from specchat.catalog import compat
    from specchat.catalog.catalog import Catalog, installed_path, resolve_model

    drafts = [DraftChoice(model="default"), DraftChoice(ngram=True),
              DraftChoice(ngram=True, model="default")]
    try:
        path = resolve_model(target, "target")
        catalog = Catalog.load()
        for name, model in catalog.models.items():
            if (found := installed_path(model)) and compat.check(path, found).as_text:
                drafts.append(DraftChoice(model=name))
    except SpecchatError:
        pass  # the target's own error comes when it loads
    return drafts


def draft_lengths(shape: Sequence[float]) -> list[int]:
    """The fixed lengths to calibrate: KS, and every k up to K_MAX whose verify batch (k+1
    rows) costs less than the batch one row smaller, since there a longer draft is cheaper to
    check."""
    cheap = [k for k in range(1, min(K_MAX, len(shape) - 1) + 1) if shape[k] < shape[k - 1]]
    return sorted({*KS, *cheap})


def _rate(runs: Sequence[Run]) -> float | None:
    seconds = sum(r.decode_s for r in runs)
    return sum(max(0, r.tokens - 1) for r in runs) / seconds if seconds > 0 else None


def calibration_prompts(path: Path | None) -> list[Prompt]:
    prompts = load_prompts(path)
    if path is not None:
        return prompts
    return list({p.category: p for p in reversed(prompts)}.values())[::-1]


def tune(settings: Settings, asked: Sequence[DraftChoice | str], prompts: Sequence[Prompt],
         tokens: int, progress: Progress | None = None, trees: bool = False) -> dict[str, Any]:
    """Measure and recommend; the result is what `--json` prints."""
    from specchat.loading import load_drafter, load_target, one_draft_model_on_servers

    models = settings.models
    drafts = [DraftChoice.of(d) for d in asked]
    one_draft_model_on_servers(models, drafts)
    target = load_target(models.target, models)
    drafters: dict[DraftChoice, Drafter] = {}
    try:
        rng = np.random.default_rng(0)
        drafters |= {d: load_drafter(d, target, SamplingParams(), rng, models) for d in drafts}
        return _calibrate(target, drafters, prompts, tokens, progress, trees)
    finally:
        for drafter in drafters.values():
            drafter.close()
        target.close()


def _calibrate(target: Backend, drafters: dict[DraftChoice, Drafter], prompts: Sequence[Prompt],
               tokens: int, progress: Progress | None, trees: bool) -> dict[str, Any]:
    """The verify curve, each drafter's pass, then every arm on every prompt (BenchRunner,
    target only first), and what each arm measured against the target alone."""
    task = progress.add_task("timing the verify curve", total=None) if progress else None

    def step(text: str) -> None:
        if progress is not None and task is not None:
            progress.update(task, advance=1, description=text)

    cpu_start = cpu.sample()
    warm_up(speculative_engine(target, NoDrafter(), SamplingParams()))
    ids = user_turn(target, prompts[0].text)
    target.eval(ids, len(ids) - 1)
    times = timing.verify_times(target, repeats=timing.COST_REPEATS)
    verify = [statistics.median(t) for t in times]
    shape = tuple(v / verify[0] for v in verify)
    ks = draft_lengths(shape)
    draft_ms, untimed = _draft_pass_ms(drafters, target.tokens)
    drafts = [d for d in drafters if d not in untimed]
    plan = _plan(drafts, drafters, ks, trees)
    if progress is not None and task is not None:
        progress.update(task, total=len(prompts) * (len(plan) + 1) + 1)
    step("calibrating")
    runner = BenchRunner(target, drafters | {DraftChoice(): NoDrafter()},
                         [BenchArm(DraftChoice())] + [arm for arm, _ in plan], tokens,
                         prepare=lambda engine: setattr(engine.policy.costs.machine, "shape",
                                                        shape), baseline_steps=0, warm=False)
    runs: list[list[Run]] = [[] for _ in range(len(plan) + 1)]
    for prompt in prompts:
        for i, run in enumerate(runner.run(prompt)):
            runs[i].append(run)
            step(f"{prompt.category}/{prompt.name}: {run.arm}")
    base_runs = runs[0]
    base = _rate(base_runs)
    # a draft pass as it costs between target passes (both models' weights share the CPU's
    # caches there; timed alone, the 0.5B pass on the default pair looked a third cheaper)
    longest = {d: [r for (arm, t), rs in zip(plan, runs[1:]) for r in rs
                   if arm.drafter == d and t.policy == PolicyKind.FIXED and t.k == max(ks)]
               for d in drafts}
    in_turn = {d: 1000 * sum(r.draft_s for r in longest[d]) / sum(r.drafted for r in longest[d])
               if sum(r.drafted for r in longest[d]) and draft_ms[d] else draft_ms[d]
               for d in drafts}
    arms = []
    for (bench_arm, arm), mine in zip(plan, runs[1:]):
        d = bench_arm.drafter
        pairs = [pair for r in longest[d] for pair in r.drafts]
        accept = [rate for rate, _ in conditional_rates(pairs, max(ks))]
        accept += [accept[-1] if accept else 0.0] * (K_MAX - len(accept))
        drafted = sum(r.drafted for r in mine)
        arm.acceptance = sum(r.accepted for r in mine) / drafted if drafted else None
        rate = _rate(mine)
        arm.measured_speedup = rate / base if rate and base else None
        arm.measured_low, arm.measured_high = paired_speedup_interval(
            [(max(0, r.tokens - 1), r.decode_s) for r in mine],
            [(max(0, r.tokens - 1), r.decode_s) for r in base_runs])
        if arm.policy == PolicyKind.FIXED:
            arm.predicted_speedup = costs.speedup(
                costs.Costs(tuple(verify), in_turn[d]), accept, arm.k)
        else:
            predicted = [r.predicted_tokens_per_second for r in mine
                         if r.predicted_tokens_per_second]
            arm.predicted_speedup = statistics.median(predicted) / base if predicted and base else None
        arms.append(arm)
    save_tuned(models_dir(), target.path.name, {
        _menu_key(d, drafters[d]): _measured(d, arms, in_turn[d], verify[0]) for d in drafts})
    best, paying = choose(arms) if arms else (None, False)
    recommended = ({"draft": best.draft, "k": best.k, "policy": best.policy, "tree": best.tree}
                   if paying and best else {"draft": str(DraftChoice()), "k": DraftSettings().k,
                                            "policy": PolicyKind.FIXED, "tree": False})
    others = cpu.others_share(cpu_start, cpu.sample())
    busy = cpu.busy_note(others, "the calibration")
    return {
        "untimed": {str(d): why for d, why in untimed.items()},
        "target": target.name, "prompts": [f"{p.category}/{p.name}" for p in prompts],
        "tokens": tokens, "target_only_tps": base,
        "threads": {"target": getattr(target, "n_threads", None),
                    "draft": next((getattr(d.model, "n_threads", None) for d in drafters.values()
                                   if d.model), None)},
        "verify_cost": [{"n": n, "ms": round(ms, 3), "ratio": round(ms / verify[0], 3),
                         "spread_ratio": round(timing.spread(t) / verify[0], 3)}
                        for n, ms, t in zip(timing.SIZES, verify, times)],
        "draft_ms": {str(d): ms for d, ms in draft_ms.items()},
        "draft_ms_in_turn": {str(d): ms for d, ms in in_turn.items()},
        "drafters": [asdict(a) for a in arms],
        "others_cpu": others,
        "recommended": None if busy else recommended,
        "why": busy or (f"{best.draft} {_how(best)} measured "
                        f"{speedup_text(best.measured_speedup, best.measured_low, best.measured_high)}"
                        if paying and best else "no drafter measured more than "
                        f"{(MARGIN - 1) * 100:.0f}% faster than the target alone here, with its "
                        "95% interval above 1.0"),
    }


def _plan(drafts: Sequence[DraftChoice], drafters: dict[DraftChoice, Drafter], ks: Sequence[int],
          trees: bool) -> list[tuple[BenchArm, Tuned]]:
    """Each drafter at each k, with the adaptive policy, and drafting trees where asked (a
    draft that drafts as text drafts chains): how to run it, and its row of the result."""
    plan: list[tuple[BenchArm, Tuned]] = []
    for d in drafts:
        plan += [(BenchArm(d, DraftSettings(k=k)), Tuned(str(d), k, PolicyKind.FIXED)) for k in ks]
        plan.append((BenchArm(d, DraftSettings(k=K_MAX, policy_kind=PolicyKind.ADAPTIVE)),
                     Tuned(str(d), K_MAX, PolicyKind.ADAPTIVE)))
        if trees and not isinstance(drafters[d], TextDrafter):
            plan.append((BenchArm(d, DraftSettings(k=K_MAX, policy_kind=PolicyKind.ADAPTIVE,
                                                    tree=TreeSettings())),
                         Tuned(str(d), K_MAX, PolicyKind.ADAPTIVE, tree=True)))
    return plan


def _draft_pass_ms(drafters: dict[DraftChoice, Drafter], committed: Sequence[int]
                   ) -> tuple[dict[DraftChoice, float], dict[DraftChoice, str]]:
    """Each drafter's pass in ms after reading `committed` (the target's tokens) in its own
    tokens (a draft of another vocabulary drafts as text: the text re-encoded), 0 for one with
    no model; and, by drafter, why one could not be timed (it is left out, the others go on)."""
    timed, untimed = {}, {}
    for d, drafter in drafters.items():
        inner = drafter.drafter if isinstance(drafter, CombinedDrafter) else drafter
        try:
            own = inner.own_tokens(committed) if isinstance(inner, TextDrafter) else committed
            timed[d] = timing.draft_pass_after(inner.model, own, 6) if inner.model else 0.0
        except SpecchatError as exc:
            untimed[d] = str(exc)
    return timed, untimed


def _how(arm: Tuned) -> str:
    return f"{arm.policy}{' tree' if arm.tree else ''} k={arm.k}"


def choose(arms: Sequence[Tuned]) -> tuple[Tuned, bool]:
    """The arm to recommend and whether it pays: the fastest of those faster than the target
    alone by MARGIN, and measurably so (the 95% interval above 1.0); where none is, the fastest
    arm, which does not pay. The fastest arm of all may not pay where a slower one does: a noisy
    arm can measure higher with an interval reaching below 1.0."""
    paying = [a for a in arms if a.measured_speedup is not None and a.measured_speedup >= MARGIN
              and (a.measured_low is None or a.measured_low > 1.0)]
    return max(paying or arms, key=lambda a: a.measured_speedup or 0.0), bool(paying)


def _menu_key(draft: DraftChoice, drafter: Drafter) -> str:
    """The draft as the menu names it: its model's file (names like `default` resolved)."""
    model = drafter.model
    if model is None:
        return draft.key
    return draft.with_model(str(model.path)).key


def _measured(draft: DraftChoice, arms: Sequence[Tuned], draft_ms: float, step_ms: float
              ) -> dict[str, Any]:
    """The draft's best arm here, what a draft pass costs in target steps, and when and on
    which llama.cpp build it was measured: what the draft menu shows."""
    best = max((a for a in arms if a.draft == str(draft)), key=lambda a: a.measured_speedup or 0.0)
    out = {k: v for k, v in asdict(best).items() if v is not None}
    out |= {"draft_steps": round(draft_ms / step_ms, 3) if step_ms else 0.0,
            "when": time.strftime("%Y-%m-%d"), "build": installed_build()}
    return out


def table(result: dict[str, Any]) -> Table:
    t = Table(title=f"{result['target']}: {len(result['prompts'])} prompts × {result['tokens']} "
                    f"tokens, target-only {result['target_only_tps'] or 0:.1f} tok/s",
              title_justify="left")
    for column in ("drafter", "policy", "k", "predicted", "measured (95% interval)", "acceptance"):
        t.add_column(column, justify="left" if column in ("drafter", "policy") else "right",
                     overflow="fold")
    for a in result["drafters"]:
        t.add_row(a["draft"], a["policy"] + (" tree" if a.get("tree") else ""), str(a["k"]),
                  "–" if a["predicted_speedup"] is None else f"{a['predicted_speedup']:.2f}x",
                  speedup_text(a["measured_speedup"], a["measured_low"], a["measured_high"],
                               compact=True),
                  "–" if a["acceptance"] is None else f"{a['acceptance']:.0%}")
    for draft, why in result.get("untimed", {}).items():
        t.add_row(draft, "–", "–", "–", f"not timed: {why}", "–")
    return t


def run(args: argparse.Namespace) -> int:
    from specchat import settings as schema

    settings = schema.from_args(args, skip=("draft",))
    try:
        drafts = ([DraftChoice.parse(d) for d in args.draft] if args.draft
                  else default_drafts(settings.models.target))
    except ValueError as exc:
        raise SpecchatError(f"--draft: {exc}") from None
    prompts = calibration_prompts(args.prompts)
    err = Console(stderr=True)
    with Progress(console=err, transient=True, disable=args.json) as progress:
        result = tune(settings, drafts, prompts, args.max_tokens, progress, args.tree)
    rec = result["recommended"]
    if args.json:
        print(json.dumps(result))
    else:
        console = table_console()
        console.print(table(result))
        v = {row["n"]: row["ratio"] for row in result["verify_cost"]}
        spread = {row["n"]: row["spread_ratio"] for row in result["verify_cost"]}
        console.print("verifying 2, 4, 8 tokens costs " + ", ".join(
            f"{v[n]:.2f} (±{spread[n] / 2:.2f})" for n in (2, 4, 8)) + " target steps here (the "
            f"middle half of {timing.COST_REPEATS} interleaved timings each).")
        threads = result["threads"]
        console.print(f"threads: target {threads['target'] or '–'}, draft "
                      f"{threads['draft'] or '–'} (--threads, --draft-threads; "
                      "docs/lab/2026-12-01-threads-on-a-busy-machine.md: which pays).")
        if rec is None:
            console.print(f"no recommendation: {result['why']}; run it again on a quiet machine")
        else:
            console.print(f"recommended: --draft {rec['draft']} --policy {rec['policy']} "
                          f"--k {rec['k']}{' --tree' if rec['tree'] else ''} ({result['why']})")
    if args.save and rec is None:
        raise SpecchatError(f"not saving: {result['why']}")
    if args.save:
        config = Config.load()
        if config.error:
            raise SpecchatError(f"not saving: {config.error}")
        engine = config.data.setdefault("engine", {})
        engine.update({"draft": rec["draft"], "policy": rec["policy"], "k": rec["k"],
                       "tree": rec["tree"]})
        config.save()
        err.print(f"saved to {config.path}: it is the default from now on", style="dim")
    return 0
