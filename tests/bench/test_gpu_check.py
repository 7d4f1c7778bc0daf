"""benchmarks/gpu/check.sh in its CPU mode (--cpu --small), called through benchmarks/gpu_check.sh
(the entry a device session calls), so the GPU check cannot rot where no GPU is: the same steps
(tests of both backends, the verify curve, draft pass, the engine's rounds at each k, the
prediction) on CPU-sized random-weight models, and the report's documented form."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.checks import require_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)  # both backends' tests and measurements in child processes
def test_the_gpu_check_runs_on_the_cpu_and_writes_its_report(tmp_path):
    require_module("torch")
    out = tmp_path / "out"
    proc = subprocess.run([str(ROOT / "benchmarks" / "gpu_check.sh"), "--cpu", "--small", "--out",
                           str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "gpu_check.json").read_text())
    assert {"date", "machine", "build", "tests", "depth", "accept", "backends",
            "not_done"} <= data.keys()
    assert data["tests"]["ran"] and data["tests"]["failed"] == []
    assert sum(c["passed"] for c in data["tests"]["files"].values()) >= 5
    assert [b["backend"] for b in data["backends"]] == ["llamacpp", "transformers"]
    for b in data["backends"]:
        assert b["error"] == ""
        assert [v["n"] for v in b["verify"]] == list(range(1, 17))
        assert b["verify"][0]["ratio"] == 1.0 and all(v["ms"] > 0 for v in b["verify"])
        assert b["draft_ms"] > 0 and b["target_only_tps"] > 0
        assert [r["k"] for r in b["rounds"]] == list(range(1, 9))
        assert all(r["round_ms"] > 0 and r["predicted_speedup"] > 0 for r in b["rounds"])
        assert b["best_k"] == max(b["rounds"], key=lambda r: r["predicted_speedup"])["k"]
    report = (out / "gpu_check.md").read_text()
    for heading in ("## Correctness on the device", "## What a verify pass costs",
                    "Predicted best k", "## What it could not do"):
        assert heading in report
    assert (out / "gpu_check.log").stat().st_size > 0
    assert (out / "tests-llamacpp.xml").exists() and (out / "tests-transformers.xml").exists()
