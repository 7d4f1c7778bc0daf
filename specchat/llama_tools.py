"""llama.cpp's own tools (llama-server, llama-bench, llama-speculative-simple) beside specchat:
the vendored source of the installed llama-cpp-python unpacked once, built in one cmake tree
with install.sh's flags (the log in a file a failure names, the progress as it goes), or the
llama-server that $SPECCHAT_LLAMA_SERVER names or the PATH holds, checked for what specchat's
client needs of it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

from specchat.errors import SpecchatError

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("llama-bench", "llama-speculative-simple", "llama-server")
NEEDED_FLAGS = ("--spec-type", "--spec-draft-n-max", "--spec-draft-model")
"""What specchat passes a llama-server: older builds took --draft-max and drafted unasked."""

Progress = Callable[[int], None]
"""Called with the build's percent done."""


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specchat"


def llama_source() -> Path:
    """The vendored llama.cpp of the installed llama-cpp-python's sdist, unpacked once."""
    try:
        import llama_cpp
    except ImportError:
        raise SpecchatError("building llama.cpp's tools needs llama-cpp-python: run "
                            "./install.sh (or give SPECCHAT_LLAMA_SERVER)") from None
    version = llama_cpp.__version__
    src = cache_dir() / "llama.cpp" / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if not (src / "CMakeLists.txt").exists():
        dl = cache_dir() / "src"
        sdist = dl / f"llama_cpp_python-{version}.tar.gz"
        if not sdist.exists():
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--no-binary", ":all:", f"llama-cpp-python=={version}", "-d",
                            str(dl)], check=True)
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name]
            tar.extractall(cache_dir() / "llama.cpp", members=members, filter="data")
    return src


def built(tools: tuple[str, ...] = TOOLS) -> Path | None:
    """The folder holding `tools` if they were built already."""
    try:
        import llama_cpp
    except ImportError:
        return None
    bin_dir = (cache_dir() / "llama.cpp" / f"llama_cpp_python-{llama_cpp.__version__}" /
               "vendor" / "llama.cpp" / "build" / "bin")
    return bin_dir if all((bin_dir / t).exists() for t in tools) else None


def build_tools(tools: tuple[str, ...] = TOOLS, progress: Progress | None = None) -> Path:
    """The folder holding `tools`, built in one cmake tree of the vendored source where they
    are missing; the build's output goes to a log file, which a failure names."""
    if (done := built(tools)) is not None:
        return done
    src = llama_source()
    build = src / "build"
    if not (ROOT / "install.sh").exists():
        raise SpecchatError("building llama.cpp's tools needs a specchat checkout (install.sh "
                            "names this CPU's instruction sets); or give SPECCHAT_LLAMA_SERVER")
    flags = subprocess.run([str(ROOT / "install.sh"), "--print-cmake-args"], check=True,
                           capture_output=True, text=True).stdout.split()
    log = cache_dir() / "llama.cpp" / "build-tools.log"
    steps = [["cmake", "-S", str(src), "-B", str(build), *flags, "-DCMAKE_BUILD_TYPE=Release",
              "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF",
              "-DLLAMA_OPENSSL=OFF"],
             ["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2), "--target", *tools]]
    with open(log, "w") as out:
        for step in steps:
            proc = subprocess.Popen(step, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                if progress and (m := re.match(r"\[\s*(\d+)%\]", line)):
                    progress(int(m.group(1)))
            if proc.wait():
                raise SpecchatError(f"building {', '.join(tools)} failed (exit {proc.returncode}); "
                                    f"the build log is {log}")
    return build / "bin"


def find_server(progress: Progress | None = None) -> tuple[Path, str]:
    """A llama-server to run and its version line: $SPECCHAT_LLAMA_SERVER, else one on the
    PATH, else the one built here (built first where missing). One that lacks what specchat
    passes it is refused in one line."""
    given = os.environ.get("SPECCHAT_LLAMA_SERVER") or shutil.which("llama-server")
    binary = Path(given) if given else build_tools(("llama-server",), progress) / "llama-server"
    try:
        help_text = subprocess.run([str(binary), "--help"], capture_output=True, text=True,
                                   timeout=60).stdout
        version = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                                 timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SpecchatError(f"cannot run llama-server {binary}: {exc}") from None
    line = next((v for v in (version.stdout + version.stderr).splitlines()
                 if v.startswith("version")), "version unknown")
    missing = [flag for flag in NEEDED_FLAGS if flag not in help_text]
    if missing:
        raise SpecchatError(f"llama-server {binary} ({line}) is older than specchat needs: it "
                            f"has no {', '.join(missing)}; unset SPECCHAT_LLAMA_SERVER or take "
                            "it off the PATH, and specchat builds its own")
    return binary, line
