"""`specchat models optimize [NAME|default]`: a model re-laid for this CPU's kernels, beside the
original, measured against it.

The layout comes from what this llama.cpp build has repacked kernels for
(`catalog.layout.choose_layout`). The new file goes into the models folder as
`<source>.<layout suffix>.gguf`, with a record in `derived.toml` there: its source and the
source's quantization, the rounding it adds (for Q4_0, llama.cpp's quantizer lays the file out
and each block's scale is then fitted by least squares: optimize/block_scales.py), its SHA-256,
and what it measured on this machine: a step and the verify batch of 1..9 tokens in steps,
original beside optimized, and for a target, the quality it gives up (KL divergence of
next-token distributions from the original's over the prompt suite, and which greedy replies
change and where). A draft's layout cannot change what the user gets, only how fast: its
quality is not measured.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from specchat import cpu
from specchat.bench.runner import Prompt, load_prompts
from specchat.catalog import compat
from specchat.catalog.catalog import Catalog, models_dir, resolve_model
from specchat.catalog.fetch import sha256_file
from specchat.catalog.layout import (
    LEAST_SQUARES,
    Q4_0,
    Derived,
    Layout,
    choose_layout,
    load_derived,
    quality_text,
    save_derived,
)
from specchat.cpu import CpuWatch
from specchat.engine.backend import Backend
from specchat.native.llama_tools import installed_build
from specchat.optimize.measure import TIMING_TRIES, pair_cost
from specchat.optimize.quality import layout_quality
from specchat.optimize.stages import Progress as Report
from specchat.optimize.stages import rewrite
from specchat.settings import ModelOptions


@dataclass(frozen=True)
class Job:
    """One model to re-lay: its file, its name in the catalog (or its stem), its role in the
    default pair (empty where it is named by itself)."""

    path: Path
    name: str
    role: str


def jobs(choice: str, catalog: Catalog) -> list[Job]:
    """`default`: the pair's draft, then its target; else the one model `choice` names."""
    if choice == "default":
        pair = catalog.pairs["default"]
        return [Job(resolve_model(pair[role], role, catalog), pair[role], role)
                for role in ("draft", "target")]
    path = resolve_model(choice, "target", catalog)
    name = choice if choice in catalog.models else path.stem
    return [Job(path, name, "")]


def _load(path: Path, options: ModelOptions) -> Backend:
    """The model on the CPU, on the threads the free cores allow (as a turn runs: a thread
    without a core of its own makes every pass wait)."""
    from specchat.loading import load_model

    model = load_model(path, options, 1024, 0)
    if (free := CpuWatch().begin()) is not None:
        model.fit_threads(free)
    return model




def _quiet(stage: str, done: int, total: int | None) -> None:
    pass


def retime(job: Job, known: Derived, dest: Path, options: ModelOptions,
           report: Report = _quiet) -> Derived:
    """A record timed on another llama.cpp build timed again on this one (the file and its
    quality stay: the build changes speed, not the weights)."""
    def step(text: str) -> None:
        report(f"{known.name}: {text}", 0, None)

    source, derived = _load(job.path, options), _load(dest / known.file, options)
    try:
        record = replace(known, cost=pair_cost(source, derived, step))
    finally:
        source.close()
        derived.close()
    save_derived(dest, record)
    return record


def already_made(job: Job, layout: Layout, dest: Path) -> Derived | None:
    """The record of this model in this layout, if its file is there whole."""
    name = f"{job.path.stem}.{layout.suffix}"
    known = load_derived(dest).get(name)
    out = dest / f"{name}.gguf"
    return known if known and out.is_file() and out.stat().st_size == known.size else None


def make(job: Job, layout: Layout, dest: Path, options: ModelOptions, prompts: Sequence[Prompt],
         tokens: int, report: Report = _quiet) -> Derived:
    """Re-lay one model (optimize/stages.py), hash it, measure it against its source, and
    record it."""
    name = f"{job.path.stem}.{layout.suffix}"
    out = dest / f"{name}.gguf"
    source_info = compat.header(job.path)
    dest.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    made = rewrite(job.path, layout, job.role, out,
                   lambda text, n, total: report(f"{name}: {text}", n, total))
    made_s = time.perf_counter() - t0
    report(f"{name}: SHA-256", 0, None)
    digest = sha256_file(out)
    steps = 2 + (len(prompts) if job.role != "draft" else 0)
    done = 0

    def step(text: str) -> None:
        nonlocal done
        report(f"{name}: {text}", done, steps)
        done += 1

    source, derived = _load(job.path, options), _load(out, options)
    try:
        cost = pair_cost(source, derived, step)
        step("comparing replies")
        quality = {} if job.role == "draft" else layout_quality(source, derived, prompts,
                                                                tokens, step)
    finally:
        source.close()
        derived.close()
    record = Derived(
        name=name, source=job.name, source_file=job.path.name,
        source_sha256=_catalog_sha(job.name) or sha256_file(job.path),
        source_quant=source_info.quantization, layout=layout.name, file=out.name,
        size=out.stat().st_size, sha256=digest, role=job.role,
        rounding=f"every matrix {source_info.quantization} → {layout.name}: a second rounding "
                 "of weights that were already quantized"
                 + (", each block's scale fitted by least squares" if made.fitted_scales else ""),
        scales=LEAST_SQUARES if made.fitted_scales else "",
        made_s=round(made_s, 1), cost=cost, quality=quality, hot_tokens=made.hot_tokens,
        fused_qkv=made.fused_qkv)
    save_derived(dest, record)
    return record


def _catalog_sha(name: str) -> str:
    model = Catalog.load().models.get(name)
    return model.sha256 if model else ""


def summary_table(records: Sequence[Derived]) -> Table:
    """Original beside optimized: a step and the verify batches that decide speculation."""
    t = Table(title="original → optimized (timed here)", title_justify="left")
    for column in ("model", "step ms", "verify 4 / 5 / 8 tokens, in steps"):
        t.add_column(column, justify="left" if column == "model" else "right")
    for r in records:
        s, d = r.cost.get("source", {}), r.cost.get("derived", {})
        t.add_row(f"{r.source}\n→ {r.name}",
                  f"{s.get('step_ms', 0):.1f}\n{d.get('step_ms', 0):.1f}",
                  f"{_steps(s)}\n{_steps(d)}")
    return t


def _steps(cost: dict[str, Any]) -> str:
    v = cost.get("verify_steps", [])
    return " / ".join(f"{v[n - 1]:.1f}" for n in (4, 5, 8) if n <= len(v)) or "–"


def run(args: argparse.Namespace) -> int:
    from specchat.backends.llamacpp import system_info
    from specchat.loading import require_llama_cpp
    from specchat.optimize.fused_qkv import can_fuse_qkv

    require_llama_cpp()
    console = Console(highlight=False)
    info, gpu = system_info()
    layout, why = choose_layout(info, gpu)
    if layout is None:
        console.print(f"nothing to optimize: {why}")
        return 0
    console.print(f"layout {layout.name}: {why}")
    todo = jobs(args.name, Catalog.load())
    prompts = load_prompts()
    options = ModelOptions(threads=args.threads)
    dest = models_dir()
    t0 = time.perf_counter()
    records = []
    build = installed_build()
    for job in todo:
        known = None if args.force else already_made(job, layout, dest)
        if known is not None and known.cost.get("build") == build:
            console.print(f"[green]ok[/] {known.name} already made → {dest / known.file} "
                          "(--force makes it again)")
            if layout == Q4_0 and known.scales != LEAST_SQUARES:
                console.print("   its block scales are llama.cpp's own; --force fits them by "
                              "least squares, closer to the original at the same speed")
            if not known.fused_qkv and can_fuse_qkv(dest / known.file):
                console.print("   its layers keep Q, K and V apart; --force stacks them into one "
                              "matrix a layer, the same logits a little faster")
            records.append(known)
            continue
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console) as bar:
            task = bar.add_task(job.name, total=None)

            def report(text: str, done: int, total: int | None, task: TaskID = task) -> None:
                bar.update(task, description=text, completed=done, total=total)
            if known is not None:
                console.print(f"{known.name} was timed on llama.cpp "
                              f"{known.cost.get('build') or 'of an earlier install'}; timing it "
                              f"again on {build}")
                records.append(retime(job, known, dest, options, report))
            else:
                records.append(make(job, layout, dest, options, prompts, args.quality_tokens,
                                    report))
    console.print(summary_table(records))
    for record in records:
        console.print(f"{record.name}: {quality_text(record)}")
        busy = max((record.cost.get(side, {}).get("others_cpu") or 0.0)
                   for side in ("source", "derived"))
        if busy >= cpu.BUSY_SHARE:
            console.print(f"   timed while other programs used {busy:.0%} of the CPU, "
                          f"{TIMING_TRIES} times: the policy does not start from these timings; "
                          "`specchat models optimize --force` on a quiet machine times it again")
    console.print(f"done in {time.perf_counter() - t0:.0f} s; records in {dest / 'derived.toml'}")
    if args.name == "default":
        console.print("`--target default` and `--draft default` now load these files; the "
                      "originals stay under their catalog names.")
    return 0
