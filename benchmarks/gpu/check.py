"""What speculation costs and buys on this machine's accelerator: the measurements and the report
of benchmarks/gpu/check.sh (a benchmark, not a test).

On random-weight models of a real pair's shape (Qwen2.5-7B at Q4_K as target, 0.5B at Q8_0 as
draft; `--small`: a CPU-sized pair), for each backend (llama.cpp, transformers):
  - the verify cost: the target evaluating n = 1..16 tokens at once with a logits row for each
    (what verification asks for), after a prompt of `--depth` tokens; in single-step units;
  - one draft pass (one token) and the target-only decode rate, both through the engine;
  - the engine's own round time at each k: with random weights every draft is refused, so a
    round is exactly k draft passes, the draft's catch-up and one verify of k+1 tokens;
  - the speedup each k would give at the acceptance per position measured on the CPU for the
    real default pair (the retired benchmarks.acceptance: docs/gpu.md): expected tokens per round (the
    formula the adaptive policy uses) over the round's time, against target-only; the same for
    a drafter that costs nothing (n-gram lookup) at that acceptance;
  - with `--tools DIR` (llama.cpp's llama-bench and llama-speculative-simple built from the same
    source), llama.cpp beside the engine, interleaved: the engine's target-only decode against
    llama-bench's tg at the same depth, and the engine against llama-speculative-simple with one
    file as both target and draft (every draft stands in both), with the engine's Python time
    per round there (its rounds' time less llama.cpp's decode and logits calls) and a profile.
Weights do not change any of these times; acceptance is the one number random weights cannot
give, hence the measured CPU rates.

    python -m benchmarks.gpu.check --out DIR [--device cuda|cpu] [--small] [--tools DIR]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import platform
import pstats
import signal
import statistics
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.gpu.models import QWEN_05B, QWEN_7B, SMALL_DRAFT, SMALL_TARGET, Shape
from specchat import timing
from specchat.costs import Costs, speedup
from specchat.engine.backend import Backend
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import RoundEvent, TurnEvent, turn_of
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.model_drafter import ModelDrafter
from specchat.engine.policy import expected_tokens
from specchat.engine.sampling import SamplingParams
from specchat.native import model_thread

ACCEPT_CPU = [0.824, 0.812, 0.820, 0.857, 0.895, 0.925, 0.919, 0.947]
"""Conditional acceptance at draft positions 1..8 of the default pair (Qwen2.5-Coder 1.5B
target, 0.5B draft, Q4_K_M), greedy, over the bench suite, on a 2-core CPU:
the retired `benchmarks.acceptance --k 8` (docs/gpu.md). Replace with --accept."""
SIZES = timing.SIZES
KS = (1, 2, 3, 4, 5, 6, 7, 8)
FULL_K = 4
"""Tokens drafted a round where the draft is the target's own file (every draft stands)."""
PROMPT = ("Write a Python module that implements a binary search tree with insert, delete, "
          "search and in-order traversal. Give every method a docstring.")
GREEDY = SamplingParams()


@dataclass
class RoundCost:
    k: int
    round_ms: float
    """The engine's draft + verify time per round (median over the turn's rounds)."""
    predicted_speedup: float
    """Expected tokens per round at the CPU acceptance, over the round time, vs target-only."""
    components_speedup: float
    """The same from the parts: verify(k+1) + k draft passes, in target steps."""
    free_drafter_speedup: float
    """A drafter that costs nothing (n-gram lookup) at the same acceptance."""


@dataclass
class BackendReport:
    backend: str
    device: str
    dtype: str
    target: str
    draft: str
    depth: int
    verify: list[dict[str, float]] = field(default_factory=list)
    """{n, ms, ratio}: the target evaluating n tokens, and that over one token."""
    draft_ms: float = 0.0
    target_only_tps: float = 0.0
    """Target-only tokens per second through the engine: one over its median round."""
    step_ms: float = 0.0
    """Target-only milliseconds per token through the engine (its median round)."""
    rounds: list[RoundCost] = field(default_factory=list)
    best_k: int = 0
    llamacpp: dict[str, Any] = field(default_factory=dict)
    """With --tools: `target_only` {engine_tps, bench_tps, ratio, ratios} and `full_accept`
    [{file, k, engine_tps, simple_tps, ratio, ratios, engine_accept, simple_accept,
    python_ms_per_round, llama_ms_per_round, profile}] (see against_llamacpp)."""
    error: str = ""


def verify_curve(target: Backend, prompt: list[int], repeats: int) -> list[dict[str, float]]:
    """Milliseconds for the target to evaluate n tokens after the prompt, a row for each."""
    target.truncate(0)
    target.eval(prompt, len(prompt) - 1)
    ms = timing.verify_ms(target, repeats, SIZES)
    return [{"n": n, "ms": round(m, 3), "ratio": round(m / ms[0], 3)} for n, m in zip(SIZES, ms)]


def draft_pass_ms(draft: Backend, prompt: list[int], repeats: int) -> float:
    draft.truncate(0)
    draft.eval(prompt, len(prompt) - 1)
    return timing.draft_pass_ms(draft, repeats)


def engine_costs(target: Backend, draft: Backend, prompt: list[int], tokens: int,
                 accept: list[float], verify: list[dict[str, float]], draft_ms: float,
                 ) -> tuple[float, list[RoundCost]]:
    """Target-only decode rate and each k's round time, measured through the engine."""

    def round_s(engine: SpeculativeEngine, k: int = 0) -> float:
        """Median seconds of a round (draft + verify) over the rounds that drafted k tokens,
        after a short warm-up turn; rounds, not the turn's rate, so an early end-of-text is
        harmless."""
        engine_turn(engine, prompt, 8)
        rounds = [r for r in engine_turn(engine, prompt, tokens)[1] if r.drafted == k]
        if len(rounds) < 3:
            raise RuntimeError(f"only {len(rounds)} rounds with a draft of {k} (the random model "
                               "ended its text at once)")
        return statistics.median(r.draft_s + r.verify_s for r in rounds)

    step_s = round_s(SpeculativeEngine(target, NoDrafter(), GREEDY))
    tps = 1 / step_s
    parts = Costs(tuple(row["ms"] for row in verify), draft_ms)  # n = 1, 2, ... in order
    out = []
    for k in KS:
        if k > len(accept):
            break
        drafter = ModelDrafter(draft, GREEDY, np.random.default_rng(0))
        spec_s = round_s(SpeculativeEngine(target, drafter, GREEDY, DraftSettings(k=k)), k)
        gain = expected_tokens(accept[:k])
        out.append(RoundCost(k, round(spec_s * 1000, 3), round(gain * step_s / spec_s, 3),
                             round(speedup(parts, accept, k), 3),
                             round(speedup(parts.free_drafter(), accept, k), 3)))
    return tps, out


class LlamaCalls:
    """Seconds spent inside llama.cpp's decode and logits calls while it is entered: what a
    round cost in llama.cpp, so that the rest of the round is the engine's Python."""

    def __enter__(self) -> LlamaCalls:
        import llama_cpp

        self.seconds = 0.0
        self._saved = {name: getattr(llama_cpp, name) for name in ("llama_decode", "llama_get_logits")}

        def timed(fn: Callable[..., Any]) -> Callable[..., Any]:
            def call(*a: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return fn(*a)
                finally:
                    self.seconds += time.perf_counter() - t0
            return call

        for name, fn in self._saved.items():
            setattr(llama_cpp, name, timed(fn))
        return self

    def __exit__(self, *_: object) -> None:
        import llama_cpp

        for name, fn in self._saved.items():
            setattr(llama_cpp, name, fn)


def engine_turn(engine: SpeculativeEngine, ids: list[int], n: int) -> tuple[TurnEvent, list[RoundEvent]]:
    """One turn from empty caches: its summary, and its rounds after the first (which evaluates
    the prompt)."""
    engine.clear_caches()
    events = list(engine.generate(ids, GenerationSettings(max_tokens=n)))
    return turn_of(events), [e for e in events if isinstance(e, RoundEvent) and e.round > 0]


def full_acceptance(bin_dir: Path, path: Path, load: Callable[[Path], Backend], tokens: int,
                    repeats: int, ngl: int, threads: int) -> dict[str, Any]:
    """The engine against llama-speculative-simple with `path` as both target and draft (every
    draft stands), k=FULL_K, greedy, interleaved repeats; then the engine's Python time per
    round (rounds' time less llama.cpp's calls) and its profile, from two more turns."""
    from benchmarks.tools import speculative_simple

    target, draft = load(path), load(path)
    try:
        engine = SpeculativeEngine(target, ModelDrafter(draft, GREEDY, np.random.default_rng(0)),
                                   GREEDY, DraftSettings(k=FULL_K))
        ids = target.tokenize(PROMPT)
        engine_turn(engine, ids, 16)  # warm-up
        mine, theirs = [], []
        for _ in range(repeats):
            turn, _ = engine_turn(engine, ids, tokens)
            mine.append((turn.counts.tokens_per_second or 0.0, turn.counts.acceptance_rate or 0.0))
            run = speculative_simple(bin_dir, path, path, PROMPT, tokens, FULL_K, threads, ngl)
            theirs.append((run.tok_s, run.acceptance or 0.0))
        with LlamaCalls() as calls:
            _, rounds = engine_turn(engine, ids, tokens)
        with LlamaCalls() as first_only:  # the prompt's pass: in no timed round
            engine_turn(engine, ids, 1)
        in_rounds = sum(r.draft_s + r.verify_s for r in rounds)
        c_in_rounds = calls.seconds - first_only.seconds
        profile = cProfile.Profile()
        profile.enable()
        _, profiled = engine_turn(engine, ids, tokens)
        profile.disable()
    finally:
        target.close()
        draft.close()
    ratios = [m[0] / t[0] for m, t in zip(mine, theirs) if t[0]]
    n_rounds = max(len(rounds), 1)
    stats = pstats.Stats(profile)
    top = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:12]  # type: ignore[attr-defined]
    return {
        "file": path.name, "k": FULL_K, "tokens": tokens,
        "engine_tps": round(statistics.median(m[0] for m in mine), 2),
        "simple_tps": round(statistics.median(t[0] for t in theirs), 2),
        "ratio": round(statistics.median(ratios), 3) if ratios else 0.0,
        "ratios": [round(r, 3) for r in ratios],
        "engine_accept": round(statistics.median(m[1] for m in mine), 3),
        "simple_accept": round(statistics.median(t[1] for t in theirs), 3),
        "rounds": len(rounds),
        "round_ms": round(in_rounds / n_rounds * 1000, 3),
        "llama_ms_per_round": round(c_in_rounds / n_rounds * 1000, 3),
        "python_ms_per_round": round((in_rounds - c_in_rounds) / n_rounds * 1000, 3),
        "profile": [f"{(v[2] / max(len(profiled), 1)) * 1000:.3f} ms/round own, "
                    f"{v[1]} calls: {fn[2]} ({Path(fn[0]).name}:{fn[1]})" for fn, v in top],
    }


def against_llamacpp(bin_dir: Path, target_path: Path, draft_path: Path,
                     load: Callable[[Path], Backend], args: argparse.Namespace,
                     out: dict[str, Any]) -> None:
    """llama.cpp's own loops beside the engine on the same files, each pair back to back, into
    `out` as each is done (a check cut at its deadline keeps what was measured)."""
    from benchmarks.tools import llama_bench
    from specchat.cpu import default_threads

    ngl = 999 if args.device == "cuda" else 0
    threads = default_threads()
    target = load(target_path)
    try:
        plain = SpeculativeEngine(target, NoDrafter(), GREEDY)
        prompt = [int(t) for t in np.random.default_rng(1).integers(258, target.n_vocab - 3, args.depth)]
        engine_turn(plain, prompt, 8)
        pairs = []
        for _ in range(args.repeats_tools):
            bench = llama_bench(bin_dir, target_path, args.tokens, args.depth, threads, ngl)
            turn, _ = engine_turn(plain, prompt, args.tokens)
            pairs.append((turn.counts.tokens_per_second or 0.0, bench.tok_s))
    finally:
        target.close()
    ratios = [m / b for m, b in pairs if b]
    out["target_only"] = {
        "file": target_path.name, "depth": args.depth, "tokens": args.tokens,
        "engine_tps": round(statistics.median(m for m, _ in pairs), 2),
        "bench_tps": round(statistics.median(b for _, b in pairs), 2),
        "ratio": round(statistics.median(ratios), 3) if ratios else 0.0,
        "ratios": [round(r, 3) for r in ratios]}
    out["full_accept"] = []
    for path in (draft_path, target_path):
        out["full_accept"].append(full_acceptance(bin_dir, path, load, args.tokens_tools,
                                                  args.repeats_tools, ngl, threads))


class Cut(Exception):
    """The check's deadline came mid-measurement (SIGTERM, from gpu_check.sh's `timeout`): what
    was measured so far is still reported."""


def _cut(signum: int, frame: object) -> None:
    raise Cut("cut at the check's deadline")


def measure(name: str, device: str, dtype: str, load: Callable[[Shape], Backend],
            shapes: tuple[Shape, Shape], args: argparse.Namespace) -> BackendReport:
    target_shape, draft_shape = shapes
    report = BackendReport(name, device, dtype, target_shape.name, draft_shape.name, args.depth)
    try:
        target, draft = load(target_shape), load(draft_shape)
        rng = np.random.default_rng(0)
        prompt = [int(t) for t in rng.integers(258, target.n_vocab - 3, args.depth)]
        report.verify = verify_curve(target, prompt, args.repeats)
        report.draft_ms = round(draft_pass_ms(draft, prompt, args.repeats * 2), 3)
        tps, rounds = engine_costs(target, draft, prompt, args.tokens, args.accept,
                                   report.verify, report.draft_ms)
        report.target_only_tps, report.step_ms = round(tps, 2), round(1000 / tps, 3)
        report.rounds = rounds
        report.best_k = max(rounds, key=lambda r: r.predicted_speedup).k
        target.close()
        draft.close()
        if name == "llamacpp" and args.tools:
            folder = args.models_dir
            against_llamacpp(args.tools, folder / f"{target_shape.name}.gguf",
                             folder / f"{draft_shape.name}.gguf", file_loader(args.device), args,
                             report.llamacpp)
    except Exception as exc:  # a backend that cannot run here is reported, the other still runs
        report.error = f"{type(exc).__name__}: {exc}"
    return report


def file_loader(device: str) -> Callable[[Path], Backend]:
    """A GGUF file on llama.cpp, every layer on the GPU where the device is one."""
    from specchat.backends.llamacpp import LlamaCppBackend

    return lambda path: LlamaCppBackend(path, n_ctx=4096, n_gpu_layers=None if device == "cuda" else 0)


def llamacpp_loader(device: str, folder: Path) -> Callable[[Shape], Backend]:
    from benchmarks.gpu.models import write_model

    def load(shape: Shape) -> Backend:
        path = folder / f"{shape.name}.gguf"
        if not path.exists():  # benchmarks/gpu/check.sh writes them ahead, during the build
            write_model(path, shape, seed=len(shape.name))
        return file_loader(device)(path)

    return load


def transformers_loader(device: str, dtype: str) -> Callable[[Shape], Backend]:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from benchmarks.gpu.models import hf_config
    from specchat.backends.hf import TransformersBackend

    def load(shape: Shape) -> Backend:
        torch.manual_seed(0)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(getattr(torch, dtype))
        try:
            with torch.device(device):  # initialised where it runs: seconds, not minutes
                model = Qwen2ForCausalLM(Qwen2Config(**hf_config(shape))).eval()
        finally:
            torch.set_default_dtype(previous)
        return TransformersBackend.from_model(model, shape.name, n_ctx=4096)

    return load


def machine(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "processor": platform.processor(),
                            "python": platform.python_version()}
    try:
        import llama_cpp

        info["llama_cpp_python"] = llama_cpp.__version__
        info["llama_gpu_offload"] = bool(llama_cpp.llama_supports_gpu_offload())
    except ImportError as exc:
        info["llama_cpp_python"] = f"not importable: {exc}"
    try:
        import torch
        import transformers

        info["torch"], info["transformers"] = torch.__version__, transformers.__version__
        if device == "cuda" and torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["cuda"] = torch.version.cuda
    except ImportError as exc:
        info["torch"] = f"not importable: {exc}"
    if device == "cuda":
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,"
                              "compute_cap", "--format=csv,noheader"], capture_output=True, text=True)
        info["nvidia_smi"] = smi.stdout.strip()
    return info


def test_results(paths: list[Path]) -> dict[str, Any]:
    """Counts and failures from the tiny-model tests' JUnit XML files, per test file."""
    found = [p for p in paths if p.exists()]
    if not found:
        return {"ran": False}
    files: dict[str, dict[str, int]] = {}
    failed: list[str] = []
    cases = [case for p in found for case in ET.parse(p).getroot().iter("testcase")]
    for case in cases:
        name = case.get("classname", "").split(".")[-1]
        counts = files.setdefault(name, {"passed": 0, "failed": 0, "skipped": 0})
        if case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
            failed.append(f"{name}::{case.get('name')}")
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return {"ran": True, "files": files, "failed": failed}


def llamacpp_lines(cmp: dict[str, Any]) -> list[str]:
    """The engine beside llama.cpp's tools, as report lines (none without --tools)."""
    if "target_only" not in cmp:
        return []
    t = cmp["target_only"]
    lines = ["### Beside llama.cpp's own loops (same files, interleaved; ratio = engine / llama.cpp, "
             "median of per-pair ratios)", "",
             "| measurement | engine tok/s | llama.cpp tok/s | ratio | per pair | acceptance (engine / llama.cpp) |",
             "|---|---|---|---|---|---|",
             f"| target only vs llama-bench tg{t['tokens']} at depth {t['depth']} ({t['file']}) | "
             f"{t['engine_tps']:.1f} | {t['bench_tps']:.1f} | {t['ratio']:.3f} | "
             f"{', '.join(f'{x:.2f}' for x in t['ratios'])} | |"]
    lines += [f"| {f['file']} as target and draft, k={f['k']}, {f['tokens']} tokens, vs "
              f"llama-speculative-simple | {f['engine_tps']:.1f} | {f['simple_tps']:.1f} | "
              f"{f['ratio']:.3f} | {', '.join(f'{x:.2f}' for x in f['ratios'])} | "
              f"{f['engine_accept']:.1%} / {f['simple_accept']:.1%} |" for f in cmp.get("full_accept", [])]
    lines.append("")
    for f in cmp.get("full_accept", []):
        lines += [f"Engine rounds on {f['file']} (k={f['k']}, {f['rounds']} rounds): {f['round_ms']:.2f} ms "
                  f"a round, of which llama.cpp's decode and logits calls {f['llama_ms_per_round']:.2f} ms "
                  f"and the engine's Python {f['python_ms_per_round']:.2f} ms. Profile (own time a round, "
                  "cProfile, a separate turn):", ""] + [f"- {line}" for line in f["profile"]] + [""]
    return lines


def markdown(data: dict[str, Any]) -> str:
    m, build, tests = data["machine"], data["build"], data["tests"]
    lines = [f"# specchat GPU check, {data['date']}", "",
             f"Machine: {m.get('gpu') or m.get('processor') or m['platform']} "
             f"({m.get('nvidia_smi', 'no nvidia-smi')}); {m['platform']}; Python {m['python']}; "
             f"llama-cpp-python {m.get('llama_cpp_python')} (GPU offload: "
             f"{m.get('llama_gpu_offload')}); torch {m.get('torch')}, transformers "
             f"{m.get('transformers')}, CUDA {m.get('cuda', '–')}.", "",
             f"Build: {build.get('status')} ({build.get('seconds', '–')} s; "
             f"{build.get('cmake_args', '')}).", ""]
    lines += ["## Correctness on the device (tiny models, every layer on it)", ""]
    if tests.get("ran"):
        lines += ["| test file | passed | failed | skipped |", "|---|---|---|---|"]
        lines += [f"| {f} | {c['passed']} | {c['failed']} | {c['skipped']} |"
                  for f, c in tests["files"].items()]
        lines += [""] + [f"- FAILED {f}" for f in tests["failed"]] + [""]
    else:
        lines += ["Not run.", ""]
    reports = [r for r in data["backends"] if len(r["verify"]) == len(SIZES)]  # a cut one too
    lines += ["## What a verify pass costs", "",
              "The target evaluating n tokens at once (logits for each), after a prompt of "
              f"{data['depth']} tokens, median of {data['repeats']}; × = times one token.", ""]
    if reports:
        lines.append("| n | " + " | ".join(f"{r['backend']} ms | ×" for r in reports) + " |")
        lines.append("|---|" + "---|---|" * len(reports))
        for i, n in enumerate(SIZES):
            lines.append(f"| {n} | " + " | ".join(
                f"{r['verify'][i]['ms']:.2f} | {r['verify'][i]['ratio']:.2f}" for r in reports) + " |")
        lines.append("")
    for r in (r for r in reports if r["rounds"]):
        lines += [f"## {r['backend']} on {r['device']} ({r['dtype']}): {r['target']} with draft "
                  f"{r['draft']}", "",
                  f"Target only: {r['target_only_tps']:.1f} tok/s through the engine "
                  f"({r['step_ms']:.2f} ms a token); one draft pass {r['draft_ms']:.2f} ms.", "",
                  "| k | round ms (engine) | predicted speedup | from the parts | free drafter (n-gram) |",
                  "|---|---|---|---|---|"]
        lines += [f"| {c['k']} | {c['round_ms']:.2f} | {c['predicted_speedup']:.2f}x | "
                  f"{c['components_speedup']:.2f}x | {c['free_drafter_speedup']:.2f}x |"
                  for c in r["rounds"]]
        lines += ["", f"Predicted best k: **{r['best_k']}**.", ""]
        lines += llamacpp_lines(r.get("llamacpp") or {})
    lines += ["Acceptance per draft position used for the predictions (measured on the CPU for the "
              "real default pair): " + ", ".join(f"{a:.3f}" for a in data["accept"]) + ".", ""]
    lines += ["## What it could not do", ""] + [f"- {x}" for x in data["not_done"] or ["nothing"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--small", action="store_true", help="CPU-sized models (the check's CPU mode)")
    ap.add_argument("--backends", default="llamacpp,transformers")
    ap.add_argument("--depth", type=int, default=None, help="prompt tokens before timing")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--tokens", type=int, default=None, help="tokens per timed turn")
    ap.add_argument("--accept", type=lambda s: [float(x) for x in s.split(",")],
                    default=ACCEPT_CPU, help="acceptance per draft position, comma-separated")
    ap.add_argument("--build-status", default="not built here")
    ap.add_argument("--build-seconds", default="")
    ap.add_argument("--cmake-args", default="")
    ap.add_argument("--tests-xml", type=Path, action="append", default=[],
                    help="JUnit XML of the tiny-model tests (repeatable)")
    ap.add_argument("--models-dir", type=Path, default=None)
    ap.add_argument("--tools", type=Path, default=None, metavar="DIR",
                    help="llama-bench and llama-speculative-simple built from the same source: "
                         "llama.cpp's own loops beside the engine")
    ap.add_argument("--repeats-tools", type=int, default=3,
                    help="interleaved runs of each side against llama.cpp's tools")
    ap.add_argument("--tokens-tools", type=int, default=128,
                    help="tokens a run against llama-speculative-simple")
    ap.add_argument("--not-done", action="append", default=[])
    ap.add_argument("--include", type=Path, action="append", default=[],
                    help="a gpu_check.json of an earlier run whose backend results to keep "
                         "(repeatable; one that does not exist is skipped)")
    args = ap.parse_args()
    model_thread.adopt()  # every pass on this thread, as `specchat ask` and `bench` run them
    signal.signal(signal.SIGTERM, _cut)
    args.depth = args.depth or (64 if args.small else 512)
    args.repeats = args.repeats or (3 if args.small else 7)
    args.tokens = args.tokens or (32 if args.small else 48)
    shapes = (SMALL_TARGET, SMALL_DRAFT) if args.small else (QWEN_7B, QWEN_05B)
    dtype = "bfloat16" if args.device == "cuda" else "float32"
    folder = args.models_dir = args.models_dir or Path(tempfile.mkdtemp(prefix="specchat-gpu-"))
    folder.mkdir(parents=True, exist_ok=True)
    not_done = list(args.not_done)
    backends = []
    for name in [b for b in args.backends.split(",") if b in ("llamacpp", "transformers")]:
        print(f"measuring {name} on {args.device} …", flush=True)
        try:
            load = (llamacpp_loader(args.device, folder) if name == "llamacpp"
                    else transformers_loader(args.device, dtype))
        except ImportError as exc:
            not_done.append(f"{name}: {exc}")
            continue
        report = measure(name, args.device, "Q4_K/Q8_0" if name == "llamacpp" else dtype, load,
                         shapes, args)
        if report.error:
            not_done.append(f"{name}: {report.error}")
        backends.append(report)
    for path in (p for p in args.include if p.exists()):
        earlier = json.loads(path.read_text())
        backends += [BackendReport(**{**b, "rounds": [RoundCost(**c) for c in b["rounds"]]})
                     for b in earlier["backends"]]
        not_done = earlier["not_done"] + not_done
    if args.device == "cuda":
        not_done.append("measured acceptance on the GPU: random weights are never right, so the "
                        "speedups use the CPU's measured acceptance for the real pair")
    data = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(args.device),
            "build": {"status": args.build_status, "seconds": args.build_seconds,
                      "cmake_args": args.cmake_args},
            "tests": test_results(args.tests_xml), "depth": args.depth, "repeats": args.repeats,
            "accept": args.accept, "backends": [asdict(b) for b in backends],
            "not_done": list(dict.fromkeys(not_done))}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(data, indent=1) + "\n")
    text = markdown(data)
    (args.out / "gpu_check.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
