"""llama.cpp's own tools (llama-server, llama-bench, llama-speculative-simple) beside specchat:
the vendored source of the installed llama-cpp-python unpacked once, built in one cmake tree
with install.sh's flags (the log in a file a failure names, the progress as it goes), or the
llama-server that $SPECCHAT_LLAMA_SERVER names or the PATH holds, checked for what specchat's
client needs of it."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path

from specchat.errors import SpecchatError

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "patches" / "llama.cpp"
PATCHED = "specchat-patches"
"""A file in an unpacked sdist naming the patches applied to it (their key)."""
TOOLS = ("llama-bench", "llama-speculative-simple", "llama-server")
NEEDED_FLAGS = ("--spec-type", "--spec-draft-n-max", "--spec-draft-model")
"""What specchat passes a llama-server: older builds took --draft-max and drafted unasked."""

Progress = Callable[[int], None]
"""Called with the build's percent done."""


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specchat"


def patches() -> list[Path]:
    """The changes specchat makes to llama.cpp's source, in the order they apply."""
    return sorted(PATCHES.glob("*.patch"))


def _applied(leave_out: Sequence[str]) -> list[Path]:
    return [p for p in patches() if not p.name.startswith(tuple(leave_out))]


def examples_only(patch: Path) -> bool:
    """Whether the patch changes only llama.cpp's examples/ (tools built here, never part of
    the library a wheel holds)."""
    changed = re.findall(r"^diff --git a/(\S+)", patch.read_text(encoding="utf-8"), re.MULTILINE)
    return bool(changed) and all(path.startswith("examples/") for path in changed)


def patches_key(leave_out: Sequence[str] = (), tools: bool = False) -> str:
    """The patches (but those whose names start with one of `leave_out`), hashed: a wheel or a
    tools build of other patches is another build. A patch of examples only is left out of the
    key but for the `tools` build's, so that adding one keeps the wheel, and the timings kept
    with its key, as they were."""
    digest = hashlib.sha256()
    for patch in _applied(leave_out):
        if tools or not examples_only(patch):
            digest.update(patch.read_bytes())
    return digest.hexdigest()[:16]


def _installed() -> tuple[Path, str] | None:
    """The installed llama-cpp-python's package folder and version, found without importing
    it (install.sh marks it before its requirements are installed)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]), importlib.metadata.version(
        "llama_cpp_python")


def installed_build() -> str:
    """The llama.cpp build the app runs: llama-cpp-python's version and the key of the patches
    install.sh built its wheel with (a mark it leaves in the package), or "unpatched". Timings
    are kept with it: a curve timed on another build says nothing of this one."""
    if (installed := _installed()) is None:
        return ""
    package, version = installed
    mark = package / PATCHED
    return f"{version}+{mark.read_text().strip() if mark.exists() else 'unpatched'}"


def unpack(version: str, into: Path, patched: bool = True, leave_out: Sequence[str] = ()) -> Path:
    """The sdist of llama-cpp-python `version` (downloaded once) unpacked into `into` with the
    patches applied to its vendored llama.cpp (but those whose names start with one of
    `leave_out`); returns the sdist's root. install.sh builds the wheel from it, and the tools
    build from the same, so the app and llama.cpp's tools agree."""
    dl = cache_dir() / "src"
    sdist = dl / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", f"llama-cpp-python=={version}", "-d", str(dl)],
                       check=True)
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(into, filter="data")
    root = into / f"llama_cpp_python-{version}"
    # the ceiling keeps git from taking a repository above `into` for the one to patch
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(into.resolve())}
    for patch in _applied(leave_out) if patched else []:
        done = subprocess.run(["git", "apply", "-p1", str(patch)], cwd=root / "vendor" / "llama.cpp",
                              env=env, capture_output=True, text=True)
        if done.returncode:
            raise SpecchatError(f"patch {patch.name} does not apply to llama-cpp-python {version}: "
                                f"{done.stderr.strip()}")
    if patched and not leave_out:
        (root / PATCHED).write_text(patches_key(tools=True))
    return root


def before_source(version: str, without: list[str]) -> Path:
    """Where the sdist without specchat's patches (or without only the patches `without` names,
    by their number) is unpacked and built."""
    name = f"without-{'-'.join(without)}-{patches_key(without)}" if without else "unpatched"
    return cache_dir() / "llama.cpp" / name / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"


def built_before(version: str, without: list[str]) -> Path | None:
    """The folder of that build's libllama and ggml, where they are built already."""
    bin_dir = before_source(version, without) / "build" / "bin"
    return bin_dir if list(bin_dir.glob("libllama.so*")) or list(bin_dir.glob("libllama.dylib")) else None


def before_env(libraries: Path) -> dict[str, str]:
    """The environment in which llama-cpp-python loads `libraries` instead of its own."""
    return {**os.environ, "LLAMA_CPP_LIB_PATH": str(libraries),
            "LD_LIBRARY_PATH": f"{libraries}:{os.environ.get('LD_LIBRARY_PATH', '')}"}


def _tools_root() -> Path | None:
    installed = _installed()
    return None if installed is None else cache_dir() / "llama.cpp" / f"llama_cpp_python-{installed[1]}"


def _patched(root: Path) -> bool:
    return (root / PATCHED).exists() and (root / PATCHED).read_text().strip() == patches_key(tools=True)


def llama_source() -> Path:
    """The vendored llama.cpp of the installed llama-cpp-python's sdist, unpacked once with the
    patches; unpacked again (its build with it) when the patches changed."""
    root = _tools_root()
    if root is None:
        raise SpecchatError("building llama.cpp's tools needs llama-cpp-python: run "
                            "./install.sh (or give SPECCHAT_LLAMA_SERVER)")
    if not _patched(root):
        shutil.rmtree(root, ignore_errors=True)
        unpack(root.name.removeprefix("llama_cpp_python-"), root.parent)
    return root / "vendor" / "llama.cpp"


def built(tools: tuple[str, ...] = TOOLS) -> Path | None:
    """The folder holding `tools` if they were built already from the patched source."""
    root = _tools_root()
    if root is None or not _patched(root):
        return None
    bin_dir = root / "vendor" / "llama.cpp" / "build" / "bin"
    return bin_dir if all((bin_dir / t).exists() for t in tools) else None


def build_tools(tools: tuple[str, ...] = TOOLS, progress: Progress | None = None) -> Path:
    """The folder holding `tools`, built in one cmake tree of the vendored source where they
    are missing."""
    if (done := built(tools)) is not None:
        return done
    return cmake_build(llama_source(), tools, progress)


def _percent(line: str) -> int | None:
    """How far a build is, from a line of make's ("[ 42%]") or ninja's ("[12/345]") output."""
    if m := re.match(r"\[\s*(\d+)%\]", line):
        return int(m.group(1))
    if m := re.match(r"\[(\d+)/(\d+)\]", line):
        return int(m.group(1)) * 100 // max(int(m.group(2)), 1)
    return None


def cmake_build(src: Path, targets: tuple[str, ...], progress: Progress | None = None) -> Path:
    """Build `targets` of the llama.cpp source `src` in its build folder with install.sh's
    flags, as many jobs at once as $CMAKE_BUILD_PARALLEL_LEVEL says (else the cores); the
    output goes to a log file, which a failure names. Returns the binaries' folder."""
    build = src / "build"
    if not (ROOT / "install.sh").exists():
        raise SpecchatError("building llama.cpp's tools needs a specchat checkout (install.sh "
                            "names this CPU's instruction sets); or give SPECCHAT_LLAMA_SERVER")
    flags = subprocess.run([str(ROOT / "install.sh"), "--print-cmake-args"], check=True,
                           capture_output=True, text=True).stdout.split()
    log = src.parent / "build-tools.log"
    # Ninja where there is one (a GPU image may have no make); a tree configured before keeps
    # its generator
    generator = (["-G", "Ninja"] if shutil.which("ninja") and not (build / "CMakeCache.txt").exists()
                 else [])
    steps = [["cmake", "-S", str(src), "-B", str(build), *generator, *flags, "-DCMAKE_BUILD_TYPE=Release",
              "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_UI=OFF",
              "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF"],
             ["cmake", "--build", str(build), "-j",
              os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2),
              "--target", *targets]]
    with open(log, "w") as out:
        for step in steps:
            proc = subprocess.Popen(step, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                if progress and (done := _percent(line)) is not None:
                    progress(done)
            if proc.wait():
                raise SpecchatError(f"building {', '.join(targets)} failed (exit {proc.returncode}); "
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


def main(argv: list[str]) -> int:
    """install.sh's way in, before specchat is installed: `key` prints the patches' key,
    `unpack VERSION DIR` prints the root of the patched sdist it unpacked there, and `mark KEY`
    marks the installed llama-cpp-python as built with those patches. `build SRC TARGET...`
    builds targets of a llama.cpp source in one tree and prints the binaries' folder (the GPU
    check's libraries and tools, from its bundle)."""
    if argv[:1] == ["key"]:
        print(patches_key())
    elif argv[:1] == ["mark"] and len(argv) == 2:
        if (installed := _installed()) is None:
            print("llama-cpp-python is not installed", file=sys.stderr)
            return 2
        (installed[0] / PATCHED).write_text(argv[1])
    elif argv[:1] == ["unpack"] and len(argv) == 3:
        print(unpack(argv[1], Path(argv[2])))
    elif argv[:1] == ["build"] and len(argv) >= 3:
        print(cmake_build(Path(argv[1]), tuple(argv[2:])))
    else:
        print("usage: python -m specchat.native.llama_tools key | unpack VERSION DIR | mark KEY | "
              "build SRC TARGET...", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
