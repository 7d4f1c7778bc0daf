"""What a layout costs on this machine: a step and the verify batch of each size, timed again
while other programs hold the CPU (or marked), with the llama.cpp build that timed it."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from specchat import cpu, timing
from specchat.engine.backend import Backend, user_turn
from specchat.native.llama_tools import installed_build

VERIFY_SIZES = range(1, 10)
"""Batch sizes timed for each layout: up to 9, past the 8 a draft of 7 verifies."""
COST_PROMPT = "Write a Python function that checks whether a number is prime, with a docstring."


def layout_cost(model: Backend) -> dict[str, Any]:
    """A step in ms and the verify batch of each size in steps, at the depth of a short chat
    prompt, timed interleaved (timing.verify_times)."""
    ids = user_turn(model, COST_PROMPT)
    model.truncate(0)
    model.eval(ids, len(ids) - 1)
    ms = [statistics.median(t) for t in
          timing.verify_times(model, timing.COST_REPEATS, VERIFY_SIZES)]
    model.truncate(0)
    return {"step_ms": round(ms[0], 2), "verify_steps": [round(v / ms[0], 3) for v in ms]}


TIMING_TRIES = 3
"""Timings of one file while other programs take BUSY_SHARE of the CPU or more, before the last
one is kept as it is (and marked, so the policy does not start from it)."""


def quiet_cost(model: Backend, step: Callable[[str], None]) -> dict[str, Any]:
    """`layout_cost` timed again while other programs took BUSY_SHARE of the CPU or more (up to
    TIMING_TRIES times), with the share they took while the kept timing ran (`others_cpu`):
    a curve timed beside another program's load is that load's, not this machine's."""
    for attempt in range(1, TIMING_TRIES + 1):
        start = cpu.sample()
        cost = layout_cost(model)
        share = cpu.others_share(start, cpu.sample())
        if share is None:  # too short a span to judge
            break
        cost["others_cpu"] = round(share, 3)
        if share < cpu.BUSY_SHARE:
            break
        if attempt < TIMING_TRIES:
            step(f"other programs used {share:.0%} of the CPU; timing again")
    return cost


def pair_cost(source: Backend, derived: Backend, step: Callable[[str], None]) -> dict[str, Any]:
    """Both files timed on a quiet machine where it can be (`quiet_cost`), with the llama.cpp
    build that timed them (the cost of a batch is the build's kernels as much as the layout's)."""
    step("timing the original")
    cost: dict[str, Any] = {"build": installed_build(), "source": quiet_cost(source, step)}
    step("timing the optimized")
    cost["derived"] = quiet_cost(derived, step)
    return cost


