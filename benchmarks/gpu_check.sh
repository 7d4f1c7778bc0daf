#!/usr/bin/env bash
# The GPU path in one run, for a machine with an NVIDIA GPU and no network: build
# llama-cpp-python with CUDA for the GPU it finds, run the tiny-model tests of both backends with
# every layer on the GPU, and measure what speculation costs there (verify curve, draft pass,
# target-only step, the engine's round at each k) on random-weight models of a 7B/0.5B pair's
# shape, predicting the speedup against k. Writes gpu_check.md and gpu_check.json (with the log,
# probe.log and the tests' JUnit XML) to the output folder; docs/gpu.md says how to read them.
#
#   make gpu-bundle                      here, once: .gpu/ (trimmed source and wheels, ~5 MB)
#   benchmarks/gpu_check.sh [--out DIR]       there: about 9 minutes on a 16-core H200
#   benchmarks/gpu_check.sh --cpu --small     anywhere: no build, CPU-sized models, about a minute
#
# Order (from two runs on an H200): the llama.cpp build first (~3.5 min on 16 cores, the longest
# step), then llama.cpp's probes, tests and costs, then the transformers backend's tests and
# costs in whatever time is left before --deadline (each step is cut, not the whole check).
# Options: --out DIR (default: $OUT, else gpu-check), --bundle DIR (default .gpu), --fa (also
# compile llama.cpp's flash-attention kernels: a longer build), --deadline SECONDS (default 540).
# The python used is $PYTHON, else .venv/bin/python in --cpu mode and python3 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
repo=$(pwd)
cpu=0 small=0 fa=OFF out="${OUT:-gpu-check}" bundle=.gpu deadline=540
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) cpu=1 ;;
    --small) small=1 ;;
    --fa) fa=ON ;;
    --out) out="$2"; shift ;;
    --bundle) bundle="$2"; shift ;;
    --deadline) deadline="$2"; shift ;;
    *) echo "gpu_check.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
exec > >(tee "$out/gpu_check.log") 2>&1
started=$SECONDS
not_done=()
say() { echo "[gpu_check $((SECONDS - started))s] $*"; }
left() { echo $((deadline - (SECONDS - started))); }
size_args=()
[ "$small" = 1 ] && size_args=(--small)
models=$(mktemp -d /tmp/specchat-models.XXXX)
build_status="skipped (--cpu: the installed llama-cpp-python)" build_seconds="" cmake_args=""
llama_env=()
llama_ok=1

if [ "$cpu" = 1 ]; then
  py="${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}"
  device=cpu
else
  py="${PYTHON:-python3}"
  device=cuda
  [ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
  site=/tmp/specchat-site
  mkdir -p "$site"
  say "installing the carried wheels into $site"
  "$py" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$bundle"/wheels/*.whl \
    || not_done+=("the carried wheels did not install")
  export PYTHONPATH="$site:$repo${PYTHONPATH:+:$PYTHONPATH}"
  say "GPU: $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | head -n1)"
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
  cmake_args="$(SPECCHAT_ACCEL=cuda ./install.sh --print-cmake-args) -DCMAKE_CUDA_ARCHITECTURES=${arch:-native}"
  cmake_args="$cmake_args -DLLAVA_BUILD=OFF -DGGML_CUDA_FA=$fa -DGGML_CUDA_NCCL=OFF"
  src=/tmp/specchat-src
  rm -rf "$src" /tmp/specchat-wheel && mkdir -p "$src"
  tar xzf "$bundle"/llama-cpp-python-*-trimmed.tar.gz -C "$src"
  limit=$(( $(left) - 240 ))  # what llama.cpp's probes, tests and costs and the rest need after it
  say "building llama-cpp-python: $cmake_args (limit ${limit}s)"
  t0=$SECONDS
  if [ "$limit" -gt 60 ] && CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) timeout "$limit" \
       "$py" -m pip wheel -q --no-build-isolation --no-deps -w /tmp/specchat-wheel "$src"/llama_cpp_python-* \
     && "$py" -m pip install -q --no-index --no-deps --target "$site" /tmp/specchat-wheel/llama_cpp_python-*.whl; then
    build_status=ok
  else
    build_status="failed, or cut at ${limit}s"
    llama_ok=0
    not_done+=("llama.cpp with CUDA: the build $build_status, so its tests and costs are missing")
  fi
  build_seconds=$((SECONDS - t0))
  say "build: $build_status in ${build_seconds}s"
  export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "writing the random-weight GGUF pair into $models"
  "$py" -m benchmarks.random_models "$models" "${size_args[@]}" \
    || not_done+=("the random-weight GGUF pair was not written")
fi

if [ "$cpu" = 0 ] && [ "$llama_ok" = 1 ]; then
  # Load a small model on the GPU in a child process, each way that could matter, so a crash
  # names its cause in probe.log instead of ending the check.
  say "probing llama.cpp on the GPU (probe.log)"
  "$py" -m benchmarks.random_models "$models/probe" --small >> "$out/probe.log" 2>&1
  model=$(ls "$models"/probe/small-draft*.gguf)
  load='import sys; from specchat.backends.llamacpp import LlamaCppBackend as B
b = B(sys.argv[1], n_ctx=256, n_gpu_layers=int(sys.argv[2])); print("loaded; offloaded", b.n_gpu_layers, "rows", b.eval([300, 301, 302], 0).shape)'
  probe() {  # label, env assignments...; $layers: GPU layers
    local label=$1; shift
    echo "== $label" >> "$out/probe.log"
    env "$@" timeout 60 "$py" -X faulthandler -c "$load" "$model" "${layers:-999}" >> "$out/probe.log" 2>&1
    local rc=$?
    echo "== $label: exit $rc" >> "$out/probe.log"
    say "probe $label: exit $rc"
    return $rc
  }
  if layers=999 probe "all layers on the GPU" SPECCHAT_PROBE=1; then
    llama_env=()
  elif layers=999 probe "all layers, llama.cpp logging to stderr" SPECCHAT_LLAMA_LOG=1; then
    llama_env=(SPECCHAT_LLAMA_LOG=1)
    not_done+=("llama.cpp crashed loading a model on the GPU with specchat's log callback set; it ran with SPECCHAT_LLAMA_LOG=1")
  else
    llama_ok=0
    layers=0 probe "no layer on the GPU (CUDA build)" SPECCHAT_LLAMA_LOG=1
    echo "== llama_cpp.Llama(n_gpu_layers=-1)" >> "$out/probe.log"
    timeout 60 "$py" -X faulthandler -c 'import sys, llama_cpp; llama_cpp.Llama(sys.argv[1], n_gpu_layers=-1, n_ctx=256, verbose=True); print("Llama loaded")' \
      "$model" >> "$out/probe.log" 2>&1; echo "== exit $?" >> "$out/probe.log"
    if command -v cuda-gdb >/dev/null; then
      echo "== native backtrace (cuda-gdb)" >> "$out/probe.log"
      SPECCHAT_LLAMA_LOG=1 timeout 90 cuda-gdb -q -batch -ex run -ex bt -ex "info sharedlibrary" \
        --args "$py" -c "$load" "$model" 999 >> "$out/probe.log" 2>&1
    fi
    not_done+=("llama.cpp on the GPU: loading a model crashed (probe.log has llama.cpp's log and the backtrace); its GPU tests and costs are missing")
  fi
fi

select=()
[ "$small" = 1 ] && select=(-k "greedy_matches or follows_the_target or caches_hold or cache_is_kept or same_logits")
run_tests() {  # name, pytest arguments...; cut at what is left before the deadline
  local name=$1 limit; shift
  limit=$(( $(left) - 60 )); [ "$cpu" = 1 ] && limit=300
  if [ "$limit" -lt 30 ]; then not_done+=("$name tests: no time left"); return; fi
  say "$name tiny-model tests on $device (limit ${limit}s)"
  SPECCHAT_TEST_DEVICE=$device timeout "$limit" env "${llama_env[@]}" "$py" -m pytest -q \
    -p no:cacheprovider --junitxml="$out/tests-$name.xml" "$@" \
    || not_done+=("some $name tests failed or did not finish (see the table)")
}
measure() {  # backend, extra arguments...
  local name=$1; shift
  say "measuring $name"
  env "${llama_env[@]}" timeout "$(( $(left) > 30 ? $(left) : 30 ))" "$py" -m benchmarks.gpu_check \
    --out "$out/$name" --device "$device" --backends "$name" --models-dir "$models" "${size_args[@]}" "$@" \
    || not_done+=("$name: the measurement stopped or was cut at the deadline (see the log)")
}
if [ "$llama_ok" = 1 ]; then
  run_tests llamacpp tests/engine/test_verify.py tests/engine/test_engine.py "${select[@]}"
  measure llamacpp
fi
no_llama=()  # without llama.cpp, the one test that compares the two backends cannot run
[ "$llama_ok" = 1 ] || no_llama=(--deselect tests/backends/test_hf_backend.py::test_same_weights_give_the_same_logits_on_both_backends)
run_tests transformers tests/backends/test_hf_backend.py "${select[@]}" "${no_llama[@]}"
measure transformers

say "writing the report"
args=(--out "$out" --device "$device" --backends none --build-status "$build_status"
      --build-seconds "$build_seconds" --cmake-args "$cmake_args" "${size_args[@]}"
      --tests-xml "$out/tests-llamacpp.xml" --tests-xml "$out/tests-transformers.xml")
for name in llamacpp transformers; do args+=(--include "$out/$name/gpu_check.json"); done
for line in "${not_done[@]}"; do args+=(--not-done "$line"); done
env "${llama_env[@]}" "$py" -m benchmarks.gpu_check "${args[@]}"
rc=$?
rm -rf "$models" "$out"/llamacpp "$out"/transformers  # their results are in the report
say "done (report: $out/gpu_check.md)"
exit $rc
