"""The flags the experiments share, made from the settings schema like the app's own: the
models section (--target, --draft, --ctx, --threads, GPU layers, --rpc, --backend) and the size
of a run (--repeats, --tokens, --k, --categories, --out). Each experiment names the ones it
takes, with its own defaults, so `--help` lists only what it reads."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from specchat import settings as schema
from specchat.engine.backend import Backend, user_turn
from specchat.engine.drafters import NoDrafter
from specchat.engine.loop import DraftSettings, SpeculativeEngine
from specchat.engine.sampling import SamplingParams
from specchat.loading import load_drafter, load_target, speculative_engine
from specchat.settings import ModelOptions, Settings

RUN_FLAGS: dict[str, tuple[Callable[[str], Any], str]] = {
    "repeats": (int, "runs of each arm, in a rotating order; medians are reported"),
    "tokens": (int, "tokens a turn"),
    "k": (int, "draft tokens a round"),
    "categories": (str, "comma-separated prompt categories of the suite (empty: all)"),
    "prompts": (Path, "a prompts file as `specchat bench --prompts` takes it (default: the "
                      "built-in suite), e.g. benchmarks/prompts/prose.toml"),
    "out": (Path, "also write the table into this doc"),
}
"""name -> (type, help) of every run flag an experiment may take."""

DEFAULTS = Settings()

CPU_ONLY = Settings(ModelOptions(target_gpu_layers=0, draft_gpu_layers=0))
"""Model defaults of the CPU comparisons: every layer on the CPU, as llama.cpp's tools run."""


def parser(doc: str | None, models: Settings | None = DEFAULTS, sections: tuple[str, ...] = ("models",),
           **run: Any) -> argparse.ArgumentParser:
    """A parser described by the first paragraph of `doc`, with the run flags named in `run`
    (their defaults) and the schema's `sections` (defaults from `models`; None: no model
    flags)."""
    ap = argparse.ArgumentParser(description=(doc or "").strip().split("\n\n")[0])
    for name, default in run.items():
        kind, help = RUN_FLAGS[name]
        ap.add_argument("--" + name.replace("_", "-"), type=kind, default=default,
                        help=help + (" (default: %(default)s)" if default is not None else ""))
    if models is not None:
        schema.add_arguments(ap, models, sections=sections)
    return ap


def settings(args: argparse.Namespace) -> Settings:
    """The settings the schema's flags hold."""
    return schema.from_args(args)


def threads(options: ModelOptions) -> int:
    """The thread count to give llama.cpp's own tools: --threads, else every core."""
    return options.threads or os.cpu_count() or 2


def categories(args: argparse.Namespace) -> list[str]:
    return [c for c in args.categories.split(",") if c]


def target_at_prompt(args: argparse.Namespace, prompt: str) -> tuple[Backend, list[int], int]:
    """The target the flags name, with `prompt` (as a chat message) evaluated but its last
    token: the model, the prompt's ids, and the depth every timed pass starts from."""
    from specchat.loading import load_target

    options = settings(args).models
    target = load_target(options.target, options)
    ids = user_turn(target, prompt)
    target.eval(ids, len(ids) - 1)
    return target, ids, len(target.tokens)


def greedy_engine(options: ModelOptions, k: int, draft: bool = True) -> SpeculativeEngine:
    """The flags' target with their draft (none where `draft` is False), greedy, k tokens a
    round, one generator for both, built as the app builds it (the target's timed verify
    curve, the CPU watch): the engine most experiments time."""
    target = load_target(options.target, options)
    rng = np.random.default_rng(0)
    greedy = SamplingParams(temperature=0.0)
    drafter = load_drafter(options.draft, target, greedy, rng, options) if draft else NoDrafter()
    return speculative_engine(target, drafter, greedy, DraftSettings(k=max(k, 1)), rng)
