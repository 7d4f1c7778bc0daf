"""llama.cpp's own tools beside specchat: its vendored source unpacked once, `llama-bench`,
`llama-speculative-simple` and `llama-server` built with install.sh's flags, their results
parsed; and the one helper that writes a benchmark's table into a doc.

    python -m benchmarks.tools llama-server     build the named tools, print where they are
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("llama-bench", "llama-speculative-simple", "llama-server")


def llama_source() -> Path:
    """The vendored llama.cpp of the installed llama-cpp-python's sdist, unpacked once."""
    version = llama_cpp.__version__
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specchat"
    src = cache / "llama.cpp" / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if not (src / "CMakeLists.txt").exists():
        dl = cache / "src"
        sdist = dl / f"llama_cpp_python-{version}.tar.gz"
        if not sdist.exists():
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                            ":all:", f"llama-cpp-python=={version}", "-d", str(dl)], check=True)
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name]
            tar.extractall(cache / "llama.cpp", members=members, filter="data")
    return src


def build_tools(src: Path, tools: tuple[str, ...] = TOOLS) -> Path:
    """The folder holding `tools`, built in one cmake tree of `src` where they are missing."""
    build = src / "build"
    if all((build / "bin" / t).exists() for t in tools):
        return build / "bin"
    if not (ROOT / "install.sh").exists():
        sys.exit("building llama.cpp's tools needs a specchat checkout (install.sh)")
    flags = subprocess.run([str(ROOT / "install.sh"), "--print-cmake-args"], check=True,
                           capture_output=True, text=True).stdout.split()
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), *flags,
                    "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_OPENSSL=OFF"],
                   check=True)
    subprocess.run(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 2), "--target",
                    *tools], check=True)
    return build / "bin"


def publish(table: str, doc: Path | None) -> None:
    """Print a benchmark's table and, given a doc, put it there (see `write_section`)."""
    print(table)
    if doc:
        write_section(doc, table)


def write_section(path: Path, table: str) -> None:
    """Put `table` after the `<!-- bench -->` line of a doc (the whole file if it has none)."""
    head = path.read_text().split("<!-- bench -->")[0] if path.exists() else ""
    path.write_text(head + "<!-- bench -->\n" + table + "\n" if head else table + "\n")


@dataclass
class ToolRun:
    """What one run of a llama.cpp tool (or of specchat beside it) measured."""

    tok_s: float
    acceptance: float | None = None
    tokens: int = 0
    seconds: float = 0.0


def llama_bench(bin_dir: Path, target: Path, n: int, depth: int, threads: int) -> ToolRun:
    """tg`n` at context depth `depth`: generation after as many tokens as specchat's prompt."""
    out = subprocess.run([str(bin_dir / "llama-bench"), "-m", str(target), "-p", "0", "-n", str(n),
                          "-d", str(depth), "-t", str(threads), "-r", "1", "-ngl", "0",
                          "-o", "json"],
                         check=True, capture_output=True, text=True).stdout
    return ToolRun(float(json.loads(out)[0]["avg_ts"]))


def speculative_simple(bin_dir: Path, target: Path, draft: Path, prompt: str, n: int, k: int,
                       threads: int) -> ToolRun:
    proc = subprocess.run(
        [str(bin_dir / "llama-speculative-simple"), "-m", str(target), "-md", str(draft),
         "--spec-type", "draft-simple", "-p", prompt, "-n", str(n), "--spec-draft-n-max", str(k),
         "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "--temp", "0", "-t", str(threads),
         "-c", "4096", "-ngl", "0", "-ngld", "0", "--seed", "1"],
        check=True, capture_output=True, text=True)
    log = proc.stderr + proc.stdout
    decoded = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+)", log)
    accepted = re.search(r"accept\s+=\s+([\d.]+)%", log)
    if decoded is None or accepted is None:
        raise RuntimeError(f"llama-speculative-simple printed no rate or acceptance:\n{log[-2000:]}")
    accept = float(accepted[1]) / 100
    return ToolRun(float(decoded[3]), accept, int(decoded[1]), float(decoded[2]))


if __name__ == "__main__":
    print(build_tools(llama_source(), tuple(sys.argv[1:]) or TOOLS))
