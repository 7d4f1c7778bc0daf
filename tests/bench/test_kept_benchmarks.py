"""Every benchmark kept in benchmarks/ runs, as its docstring says to run it, on the tiny pair
laid under the default pair's file names (what `default` resolves to), to its table: an
experiment that guards a claim of specchat cannot rot unseen. (The GPU check has its own test,
tests/bench/test_gpu_check.py.) The numbers are the tiny models' and are not checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.checks import missing
from support.models import lay_default_pair
from support.processes import llama_server_binary, specchat_env

from specchat.native.llama_tools import cache_dir

ROOT = Path(__file__).resolve().parents[2]
KEPT = {  # module -> (its arguments, a line its output must have)
    "vs_llamacpp": (["--repeats", "1", "--tokens", "16", "--k", "3"],
                    "Speculative over target-only"),
    "policy_vs_llamacpp": (["--repeats", "1", "--categories", "short", "--k", "2", "--n-max", "2",
                            "--results", "{tmp}/results"], "**whole suite**"),
    "policy_ab": (["--against", "HEAD", "--repeats", "1", "--categories", "short", "--tokens",
                   "8"], "the same tokens from HEAD and tree: "),
    "horizon_ab": (["--repeats", "1", "--categories", "short"], "reply lengths over 32 tokens"),
    "ceiling": (["--repeats", "1", "--tokens", "64", "--lengths", "1,3"],
                "every draft standing, median"),
    "gemm_patch": (["--target", "{q4_0}", "--repeats", "1", "--sizes", "1,4,8"],
                   "the same bits before and after: yes"),
    "tui_vs_ask": (["--repeats", "1", "--tokens", "16"], "median TUI/ask decode tok/s"),
    "room_vs_ask": (["--repeats", "1", "--tokens", "16", "--categories", "short", "--slots", "2"],
                    "| short |"),
    "workshop": (["--tabs", "1,2", "--", "replay", "code-0.5b-draft-k3", "--speed", "8"],
                 "| 2 |"),
    "batching_drift": (["{target}", "--tokens", "8"], "| tiny-target.gguf |"),
    "divergence": (["--tokens", "16"], "first divergent token"),
    "vs_hf_assisted": (["--repeats", "1", "--tokens", "16", "--k", "3"], "HF assisted"),
    "tree_sequences": (["--repeats", "1", "--tokens", "8"], "| rows | chain (steps) | tree (steps) |"),
    "ttft_typing": (["--repeats", "1", "--lengths", "12", "--chars-per-s", "400"],
                    "| ~12 tokens typed at 400 chars/s |"),
}
RUNS = [(module, *KEPT[module]) for module in sorted(KEPT)] + [
    ("tui_vs_ask", ["--one-process", "--repeats", "2", "--tokens", "16"],
     "median TUI/no-UI decode tok/s, one process"),
]
"""Each kept benchmark as KEPT runs it, and the other ways its docstring shows."""


def test_every_benchmark_left_is_kept_here_or_is_a_helper():
    helpers = {"__init__", "arguments", "tools", "llama_params", "policy_replay"}
    modules = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
    assert modules - helpers == set(KEPT)


def test_the_policy_replay_prints_every_decision():
    out = subprocess.run([sys.executable, "-m", "benchmarks.policy_replay"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    rounds = json.loads(out)
    assert len(rounds) == 3600 and any(r[3] for r in rounds) and any(r[2] > 3 for r in rounds)


@pytest.mark.parametrize(("module", "args", "expected"), RUNS,
                         ids=[module if i < len(KEPT) else f"{module}{args[0]}"
                              for i, (module, args, _) in enumerate(RUNS)])
def test_a_kept_benchmark_runs_to_its_table(module, args, expected, tiny, tmp_path):
    server_binary = llama_server_binary() or missing("llama-server", ".venv/bin/python -m "
                                                     "benchmarks.tools")
    lay_default_pair(tmp_path / "models", tiny.target, tiny.draft)
    if "{q4_0}" in args:
        from specchat.catalog.layout import Q4_0
        from specchat.optimize.quantize import quantize

        quantize(tiny.target, tmp_path / "tiny.q4_0.gguf", Q4_0)
    fill = {"{tmp}": str(tmp_path), "{q4_0}": str(tmp_path / "tiny.q4_0.gguf"),
            "{target}": str(tiny.target)}
    for key, value in fill.items():
        args = [a.replace(key, value) for a in args]
    env = specchat_env(tmp_path) | {"PYTHONPATH": str(ROOT),
                                    "SPECCHAT_LLAMA_SERVER": str(server_binary),
                                    "HF_HUB_OFFLINE": "1", "PATH": os.environ["PATH"],
                                    "XDG_CACHE_HOME": str(cache_dir().parent)}  # built tools
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", *args], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert expected in done.stdout, done.stdout[-3000:]
