#!/usr/bin/env bash
# Install specchat into .venv (or the active virtual environment), with a llama-cpp-python built
# for this machine, then fetch the default model pair.
#
#   ./install.sh            install and fetch the default pair (about 1.6 GB)
#   ./install.sh --dev      also install the test tools (and the transformers backend), and
#                           build llama.cpp's llama-server from the same source, and its
#                           libraries without specchat's patches, for the tests (about 20
#                           minutes on two cores the first time; kept in ~/.cache)
#   ./install.sh --transformers   also install the transformers backend (torch)
#   ./install.sh --no-models   skip the model fetch
#   ./install.sh --client   the light install: specchat without llama-cpp-python, torch or models
#                           (chat with a llama-server, replay and race traces); compiles nothing
#   ./install.sh --print-cmake-args   print the llama.cpp build flags for this machine and stop
#
# Accelerator: SPECCHAT_ACCEL=auto|cpu|cuda|metal (auto: CUDA where nvidia-smi lists a GPU and
# nvcc is installed, Metal on macOS, else CPU). CMAKE_ARGS, if you set it, is used as it is.
# Why not plain `pip install llama-cpp-python`: its default build compiles for the build CPU
# (GGML_NATIVE) and dies with SIGILL (AMX tile instructions) on some x86 servers. The CPU build
# here names the instruction sets this CPU reports instead.
set -euo pipefail
cd "$(dirname "$0")"

# the llama-cpp-python version: pyproject.toml's `local` extra is the one place it is written
LLAMA_CPP_PYTHON=$(sed -n 's/^local = \["llama-cpp-python==\([^"]*\)"\]/\1/p' pyproject.toml)
[ -n "$LLAMA_CPP_PYTHON" ] || { echo "install.sh: pyproject.toml's local extra pins no llama-cpp-python" >&2; exit 2; }
extras="local"  # llama-cpp-python's own requirements come with it; the wheel is built below
fetch_models=1
print_args=0
client=0
tools=0
for arg in "$@"; do
  case "$arg" in
    --dev) extras="local,dev"; tools=1 ;;
    --transformers) [ "$extras" != local ] || extras="local,transformers" ;;
    --print-cmake-args) print_args=1 ;;
    --no-models) fetch_models=0 ;;
    --client) client=1 ;;
    *) echo "install.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

accel="${SPECCHAT_ACCEL:-auto}"
if [ "$accel" = auto ]; then
  accel=cpu
  if [ "$(uname -s)" = Darwin ]; then accel=metal
  elif nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    # a CUDA toolkit without a GPU (or a GPU without nvcc) builds for the CPU
    if command -v nvcc >/dev/null 2>&1; then accel=cuda
    else echo "install.sh: NVIDIA GPU found but no nvcc (CUDA toolkit); building for the CPU" >&2; fi
  fi
fi

# The CPU part of every build names the instruction sets /proc/cpuinfo reports instead of
# -march=native (whose AMX code dies with SIGILL on some x86 servers, GPU servers included).
cpu_args() {
  if [ "$(uname -m)" = x86_64 ] && [ -r /proc/cpuinfo ]; then
    local flags args="-DGGML_NATIVE=OFF" f name
    flags=$(grep -m1 '^flags' /proc/cpuinfo)
    for f in avx avx2 fma f16c bmi2 avx512f; do
      if grep -qw "$f" <<<"$flags"; then
        name=$(tr '[:lower:]' '[:upper:]' <<<"$f"); name=${name/AVX512F/AVX512}
        args="$args -DGGML_$name=ON"
      fi
    done
    echo "$args"
  fi
}

# With GCC, llama.cpp's own copies of the C++ library's function-local statics (std::regex's
# tables among them) stay its own: by default they are "unique" symbols, which the dynamic
# linker shares process-wide with the first library that has them, so in a process that loaded
# torch first llama.cpp's tokenizer used torch's, and a CUDA build crashed there (docs/gpu.md).
unique_args() {
  if [ "$(uname -s)" = Linux ] && "${CXX:-c++}" --version 2>/dev/null | grep -q "Free Software Foundation"; then
    echo "-DCMAKE_CXX_FLAGS=-fno-gnu-unique$([ "$accel" = cuda ] && echo " -DCMAKE_CUDA_FLAGS=-Xcompiler=-fno-gnu-unique")"
  fi
}

# Where built wheels are kept between installs; wheelhouse: the light install's wheels, for the
# tests (tests/support/processes.py reads the same place).
wheels() { echo "${SPECCHAT_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specchat/wheels}"; }
wheelhouse() { echo "$(wheels)/client"; }

# Every build has the ggml RPC backend: `specchat rpc-server` and --rpc use it (off by default
# in llama.cpp).
if [ -z "${CMAKE_ARGS:-}" ]; then
  case "$accel" in
    cuda) CMAKE_ARGS="-DGGML_CUDA=on $(cpu_args)" ;;
    metal) CMAKE_ARGS="-DGGML_METAL=on" ;;
    cpu) CMAKE_ARGS="$(cpu_args)" ;;
    *) echo "install.sh: SPECCHAT_ACCEL must be auto, cpu, cuda or metal" >&2; exit 2 ;;
  esac
  CMAKE_ARGS="${CMAKE_ARGS% } $(unique_args) -DGGML_RPC=ON"; CMAKE_ARGS=${CMAKE_ARGS# }
fi
export CMAKE_ARGS
if [ "$print_args" = 1 ]; then echo "$CMAKE_ARGS"; exit 0; fi

if [ -n "${VIRTUAL_ENV:-}" ]; then
  venv="$VIRTUAL_ENV"
else
  venv=.venv
  [ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
fi
py="$venv/bin/python"
"$py" -m pip install --quiet --disable-pip-version-check --upgrade pip

if [ "$client" = 1 ]; then
  "$py" -m pip install --quiet --disable-pip-version-check -e .
  echo "specchat (client) installed in $venv: --server URL, replay and race of traces, serve;" \
       "models loaded here need ./install.sh"
  exit 0
fi


# One wheel per llama-cpp-python version, build flags and patches, kept between installs (the
# build takes 7-8 minutes on two cores). pip's own wheel cache is bypassed: it keys on the sdist
# alone and would hand back a wheel built with other CMAKE_ARGS. The wheel is built from the
# sdist with patches/llama.cpp applied (specchat.native.llama_tools unpacks and patches it, and builds
# llama.cpp's tools from the same source).
patches=$("$py" -m specchat.native.llama_tools key)
key=$(printf '%s %s %s %s' "$LLAMA_CPP_PYTHON" "$CMAKE_ARGS" "$("$py" -c 'import sys;print(sys.version_info[:2])')" "$patches" | sha256sum | cut -c1-16)
cache="$(wheels)/$key"
wheel=$(ls "$cache"/llama_cpp_python-*.whl 2>/dev/null | head -n1 || true)
if [ -z "$wheel" ]; then
  echo "building llama-cpp-python $LLAMA_CPP_PYTHON for $accel ($CMAKE_ARGS) with patches/llama.cpp; this takes several minutes"
  mkdir -p "$cache"
  src=$(mktemp -d)
  trap 'rm -rf "$src"' EXIT
  root=$("$py" -m specchat.native.llama_tools unpack "$LLAMA_CPP_PYTHON" "$src")
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}" \
    "$py" -m pip wheel --quiet --no-cache-dir --no-deps -w "$cache" "$root"
  wheel=$(ls "$cache"/llama_cpp_python-*.whl | head -n1)
fi
"$py" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
"$py" -m specchat.native.llama_tools mark "$patches"  # what the app's timings are kept with
"$py" -m pip install --quiet --disable-pip-version-check -e ".[$extras]"
echo "specchat installed in $venv (llama.cpp: $accel)"

if [ "$tools" = 1 ]; then
  "$py" -m benchmarks.tools  # llama-server, llama-bench, llama-speculative-simple
  # llama.cpp's libraries without patches/llama.cpp: the patch tests compare bits with them
  "$py" -m benchmarks.gemm_patch --build >/dev/null
  # the wheels the tests' light install and wheel build take, so that no test reaches the network
  "$py" -m pip wheel --quiet --disable-pip-version-check -w "$(wheelhouse)" hatchling editables pip .
  rm -f "$(wheelhouse)"/specchat-*.whl
  # the catalog's draft of another vocabulary (98 MB, PyPI): the commands are tested with it installed
  "$venv/bin/specchat" models fetch smollm2-135m-instruct-q4_1 >/dev/null
fi
if [ "$fetch_models" = 1 ]; then
  "$venv/bin/specchat" models fetch default
fi
