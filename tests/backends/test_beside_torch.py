"""llama.cpp keeps its own copies of the C++ library's function-local statics in a process that
loaded torch first: install.sh builds it with -fno-gnu-unique. Left "unique", the dynamic
linker shares them process-wide with torch's libraries, the tokenizer's std::regex used torch's
tables, and a CUDA build crashed loading a model on an H200 (docs/gpu.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from support.checks import require_module

LOAD = ("import sys, torch; from specchat.backends.llamacpp import LlamaCppBackend as B; "
        "B(sys.argv[1], n_ctx=256, n_gpu_layers=0)")
BINDING = re.compile(r"binding file (\S+) \[\d+\] to (\S+) \[\d+\]: normal symbol `(\S+)'")


def foreign_statics(log_dir: Path) -> tuple[int, list[str]]:
    """How many of libllama's function-local statics of std:: code (`_ZZ`, and their guards
    `_ZGVZ`) the dynamic linker bound, and those it bound to another library than libllama."""
    seen, foreign = 0, []
    for log in log_dir.iterdir():
        for line in log.read_text(errors="replace").splitlines():
            m = BINDING.search(line)
            if m and "libllama.so" in m[1] and re.match(r"_Z(GV)?ZN[KS]*St", m[3]):
                seen += 1
                if Path(m[2]).name != Path(m[1]).name:
                    foreign.append(f"{m[3]} -> {m[2]}")
    return seen, foreign


def test_llama_cpp_keeps_its_own_cxx_statics_after_torch(tiny, tmp_path):
    require_module("torch")
    logs = tmp_path / "ld"
    logs.mkdir()
    env = {**os.environ, "LD_DEBUG": "bindings", "LD_DEBUG_OUTPUT": str(logs / "bind")}
    done = subprocess.run([sys.executable, "-c", LOAD, str(tiny.target)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen, foreign = foreign_statics(logs)
    assert seen > 0, "no binding of libllama's std:: statics was logged: nothing was checked"
    assert not foreign, f"{len(foreign)} of libllama's statics bound elsewhere: {foreign[:5]}"
