#!/usr/bin/env bash
# The GPU path in one run, for a machine with an NVIDIA GPU and no network: build llama.cpp with
# CUDA for the GPU it finds (the libraries specchat loads and llama.cpp's own llama-server,
# llama-bench and llama-speculative-simple, in one tree from the patched source install.sh
# builds), run benchmarks/gpu/probe (every way of loading a model that could matter, with a
# native backtrace on a crash), load a model through specchat's backend each way until one works,
# run the tiny-model tests with every layer on the GPU, and measure what speculation costs there on random-weight
# models of a 7B/0.5B pair's shape: verify curve, draft pass, target-only step, the engine's
# round at each k, the engine beside llama.cpp's own loops, and `specchat llama-server` starting.
# Writes gpu_check.md and gpu_check.json (with the log, probe.log and the tests' JUnit XML) to
# the output folder; docs/gpu.md says how to read them.
#
#   make gpu-bundle                            here, once: .gpu/ (patched source and wheels)
#   benchmarks/gpu/check.sh --out DIR          there: about 7 minutes on a 16-core H200
#   benchmarks/gpu/check.sh --cpu --small      anywhere: no build, CPU-sized models, a minute
#   benchmarks/gpu/check.sh --cpu --build --small   the GPU path's every step on a CPU (a dry run)
#
# Options: --out DIR (default: $OUT, else gpu-check), --bundle DIR (default .gpu), --fa (also
# compile llama.cpp's flash-attention kernels: a longer build), --deadline SECONDS (default 540).
# Each step is cut at what is left, not the whole check. The python used is $PYTHON, else
# .venv/bin/python in --cpu mode and python3 otherwise.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
repo=$(pwd)
cpu=0 build=1 small=0 fa=OFF out="${OUT:-gpu-check}" bundle=.gpu deadline=540
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) cpu=1 ;;
    --build) build=2 ;;
    --small) small=1 ;;
    --fa) fa=ON ;;
    --out) out="$2"; shift ;;
    --bundle) bundle="$2"; shift ;;
    --deadline) deadline="$2"; shift ;;
    *) echo "benchmarks/gpu/check.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ "$cpu" = 1 ] && [ "$build" = 1 ] && build=0  # --cpu uses the installed build unless --build
mkdir -p "$out"
out=$(cd "$out" && pwd)
bundle=$(cd "$bundle" 2>/dev/null && pwd || echo "$bundle")
exec > >(tee "$out/gpu_check.log") 2>&1
started=$SECONDS
not_done=()
say() { echo "[gpu_check $((SECONDS - started))s] $*"; }
left() { echo $((deadline - (SECONDS - started))); }
size_args=()
[ "$small" = 1 ] && size_args=(--small)
models=$(mktemp -d /tmp/specchat-models.XXXX)
parts=$(mktemp -d /tmp/specchat-parts.XXXX)  # each backend's results, until the report joins them
build_status="skipped (--cpu: the installed llama-cpp-python)" build_seconds="" cmake_args=""
llama_ok=1 bin=""
if [ "$cpu" = 1 ]; then
  py="${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}"
  device=cpu accel=cpu
else
  py="${PYTHON:-python3}"
  device=cuda accel=cuda
  [ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
  say "GPU: $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | head -n1)"
fi
py=$(command -v "$py" || echo "$py")
write_pair() {  # the random-weight pair, written while llama.cpp builds
  "$py" -m benchmarks.gpu.models "$models" "${size_args[@]}" > "$models/written.log" 2>&1 &
  writer=$!
}

if [ "$build" != 0 ]; then
  site=/tmp/specchat-site
  rm -rf "$site" && mkdir -p "$site"
  say "installing the carried wheels into $site"
  "$py" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$bundle"/wheels/*.whl \
    || not_done+=("the carried wheels did not install")
  export PYTHONPATH="$site:$repo${PYTHONPATH:+:$PYTHONPATH}"
  write_pair
  cmake_args="$(SPECCHAT_ACCEL=$accel ./install.sh --print-cmake-args)"
  if [ "$accel" = cuda ]; then
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
    cmake_args="$cmake_args -DCMAKE_CUDA_ARCHITECTURES=${arch:-native} -DGGML_CUDA_FA=$fa -DGGML_CUDA_NCCL=OFF"
  fi
  src=/tmp/specchat-src
  rm -rf "$src" && mkdir -p "$src"
  tar xzf "$bundle"/llama-cpp-python-*-patched-trimmed.tar.gz -C "$src"
  root=$(ls -d "$src"/llama_cpp_python-*)
  v="$root/vendor/llama.cpp"
  limit=$(( $(left) - 300 ))  # what the probes, tests and measurements need after it
  say "building llama.cpp's libraries, llama-bench and llama-speculative-simple: $cmake_args (limit ${limit}s)"
  t0=$SECONDS
  if [ "$limit" -gt 60 ] && bin=$(CMAKE_ARGS="$cmake_args" timeout "$limit" "$py" -m specchat.native.llama_tools \
       build "$v" llama ggml llama-bench llama-speculative-simple); then
    build_status=ok
    # what a wheel of llama-cpp-python holds, from the same tree: its Python package, the
    # libraries beside it, the headers (for the probe's C program) and its name and version
    cp -r "$root/llama_cpp" "$site/" && mkdir -p "$site/llama_cpp/lib" "$site/include"
    cp -a "$bin"/lib*.so* "$site/llama_cpp/lib/"
    cp "$v"/include/*.h "$v"/ggml/include/*.h "$site/include/"
    cp "$root/specchat-patches" "$site/llama_cpp/"
    version=${root##*-}
    mkdir -p "$site/llama_cpp_python-$version.dist-info"
    printf 'Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: %s\n' "$version" \
      > "$site/llama_cpp_python-$version.dist-info/METADATA"
    # llama-server (with its multimodal library, the longest C++ of the tools) builds in the
    # background on a quarter of the cores while the probes and tests run
    n=$(nproc); pin=(); command -v taskset >/dev/null && [ "$n" -ge 8 ] && pin=(taskset -c "$((n * 3 / 4))-$((n - 1))")
    CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL=$(( n >= 8 ? n / 4 : n )) nice -n 10 "${pin[@]}" \
      timeout 500 "$py" -m specchat.native.llama_tools build "$v" llama-server > "$src/server-build.out" 2>&1 &
    server_build=$!
  else
    build_status="failed, or cut at ${limit}s"
    llama_ok=0
    tail -n 30 "$src"/llama_cpp_python-*/vendor/build-tools.log 2>/dev/null
    not_done+=("llama.cpp: the build $build_status, so its tests and costs are missing")
  fi
  build_seconds=$((SECONDS - t0))
  say "build: $build_status in ${build_seconds}s ($(ls "$site/llama_cpp/lib" 2>/dev/null | tr '\n' ' '))"
  export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
  write_pair
fi
wait "$writer" || not_done+=("the random-weight GGUF pair was not written ($(tail -n 1 "$models/written.log"))")
cat "$models/written.log"

native=()  # the check's own llama.cpp children print a native backtrace if they crash
if [ "$llama_ok" = 1 ] && [ "$build" != 0 ]; then
  say "benchmarks/gpu/probe: every way of loading a model, before anything else"
  SITE="$site" MODELS="$models" PYTHON="$py" timeout 150 bash benchmarks/gpu/probe/probe.sh --out "$out"
  [ -f /tmp/specchat-probe-run/segv_bt.so ] && native=(LD_PRELOAD=/tmp/specchat-probe-run/segv_bt.so)
fi

# A small model loaded on the GPU through specchat's backend in a child process, each way that
# could matter, until one loads: the first that does is how the rest of the check runs (its
# environment and llama.cpp model parameters, benchmarks/llama_params.py), and the ones before
# it name what crashed (probe.log).
llama_env=() params=""
if [ "$llama_ok" = 1 ]; then
  "$py" -m benchmarks.gpu.models "$models/probe" --small >> "$out/probe.log" 2>&1
  model=$(ls "$models"/probe/small-draft*.gguf)
  loads() {  # label, params, env assignments...
    local label=$1 p=$2; shift 2
    echo "== load: $label (params: ${p:-none}; env: ${*:-none})" >> "$out/probe.log"
    env "$@" timeout 40 "$py" -X faulthandler -m benchmarks.llama_params "$p" -m benchmarks.gpu.load "$model" 999 \
      < /dev/null >> "$out/probe.log" 2>&1
    local rc=$?
    echo "== load: $label: exit $rc" >> "$out/probe.log"
    say "load on the GPU, $label: exit $rc"
    return $rc
  }
  chosen=""
  while IFS='|' read -r label p vars; do
    read -ra e <<<"$vars"
    if loads "$label" "$p" "${e[@]}"; then chosen=$label llama_env=("${e[@]}") params=$p; break; fi
  done <<'EOF'
as specchat loads it||
llama.cpp logging to stderr||SPECCHAT_LLAMA_LOG=1
no pinned host memory||GGML_CUDA_NO_PINNED=1
no mmap|load_mode=0|
no repacked CPU buffers|use_extra_bufts=0|
no host buffers|no_host=1|
LD_LIBRARY_PATH unset||LD_LIBRARY_PATH=
all of these at once|load_mode=0,use_extra_bufts=0,no_host=1|SPECCHAT_LLAMA_LOG=1 GGML_CUDA_NO_PINNED=1
EOF
  if [ -z "$chosen" ]; then
    llama_ok=0
    loads "no layer on the GPU" "" SPECCHAT_LLAMA_LOG=1 || true
    not_done+=("llama.cpp on the GPU: every way of loading a model crashed (probe.log); its GPU tests and costs are missing")
  elif [ "$chosen" != "as specchat loads it" ]; then
    not_done+=("llama.cpp loaded a model on the GPU only with: $chosen (the rest of the check ran so)")
  fi
fi
llama_py=("$py" -X faulthandler -m benchmarks.llama_params "$params")

select=()
[ "$small" = 1 ] && select=(-k "greedy_matches or follows_the_target or caches_hold or cache_is_kept or same_logits")
run_tests() {  # name, python..., --, pytest arguments...; cut at what is left before the deadline
  local name=$1 limit runner=(); shift
  while [ "$1" != -- ]; do runner+=("$1"); shift; done; shift
  limit=$(( $(left) - 150 )); [ "$cpu" = 1 ] && limit=300
  [ "$limit" -gt 150 ] && limit=150
  if [ "$limit" -lt 30 ]; then not_done+=("$name tests: no time left"); return; fi
  say "$name tiny-model tests on $device (limit ${limit}s)"
  SPECCHAT_TEST_DEVICE=$device timeout -s INT -k 15 "$limit" env "${native[@]}" "${llama_env[@]}" "${runner[@]}" -m pytest -q \
    -p no:cacheprovider --junitxml="$out/tests-$name.xml" "$@" \
    || not_done+=("some $name tests failed or did not finish (see the table)")
}
measure() {  # backend, python..., --, extra arguments...
  local name=$1 runner=(); shift
  while [ "$1" != -- ]; do runner+=("$1"); shift; done; shift
  say "measuring $name"
  env "${native[@]}" "${llama_env[@]}" timeout "$(( $(left) > 60 ? $(left) - 50 : 10 ))" "${runner[@]}" -m benchmarks.gpu.check \
    --out "$parts/$name" --device "$device" --backends "$name" --models-dir "$models" "${size_args[@]}" "$@" \
    || not_done+=("$name: the measurement stopped or was cut at the deadline (see the log)")
}
if [ "$llama_ok" = 1 ]; then
  run_tests llamacpp "${llama_py[@]}" -- tests/engine/test_verify.py tests/engine/test_engine.py "${select[@]}"
  tools=(); [ -n "$bin" ] && tools=(--tools "$bin")
  measure llamacpp "${llama_py[@]}" -- "${tools[@]}"
  while [ -n "${server_build:-}" ] && kill -0 "$server_build" 2>/dev/null && [ "$(left)" -gt 60 ]; do sleep 2; done
  if [ -n "${server_build:-}" ] && kill -0 "$server_build" 2>/dev/null; then
    kill "$server_build"; not_done+=("llama-server: its build had not finished at the deadline")
  elif draft=$(ls "$models"/*0.5b*.gguf "$models"/small-draft*.gguf 2>/dev/null | head -n1) \
       && [ -n "$bin" ] && [ -x "$bin/llama-server" ] && [ "$(left)" -gt 40 ]; then
    say "specchat llama-server on $(basename "$draft") as target and draft (llama-server's own layer choice)"
    SPECCHAT_LLAMA_SERVER="$bin/llama-server" env "${llama_env[@]}" timeout 60 "$py" -m specchat llama-server \
      --target "$draft" --draft "$draft" --port 8093 -- -lv 4 > "$out/llama-server.log" 2>&1 &
    server=$!
    for _ in $(seq 45); do grep -q -- "--server" "$out/llama-server.log" && break; sleep 1; done
    logs=$(grep -o 'logs in [^ ]*' "$out/llama-server.log" | head -n1 | cut -d' ' -f3)
    reply=$(curl -s -m 20 http://127.0.0.1:8093/completion -d '{"prompt": "Hello", "n_predict": 16}' | head -c 400)
    { echo "== a completion: ${reply:-none}"
      echo "== GPU memory by process: $(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1 | tr '\n' ';')"
      echo "== llama-server's log ($logs):"
      grep -hE 'offload|model buffer|KV buffer|draft model|error' "$logs"/*.log 2>/dev/null | head -n 40; } >> "$out/llama-server.log"
    kill -INT "$server" 2>/dev/null; wait "$server" 2>/dev/null
    grep -qE 'offloaded [0-9]+/[0-9]+ layers' "$out/llama-server.log" \
      || not_done+=("specchat llama-server: no offload line in its log (llama-server.log)")
  fi
fi
# The one test that runs both backends in one process loads llama.cpp after torch: without
# llama.cpp it cannot run, and on CUDA that order crashed the process (docs/gpu.md)
no_llama=()
[ "$llama_ok" = 1 ] && [ "$device" = cpu ] || no_llama=(--deselect tests/backends/test_hf_backend.py::test_same_weights_give_the_same_logits_on_both_backends)
if [ "$(left)" -gt 120 ]; then
  run_tests transformers "$py" -- tests/backends/test_hf_backend.py "${select[@]}" "${no_llama[@]}"
  measure transformers "$py" --
else
  not_done+=("transformers: no time left after llama.cpp (docs/gpu.md has its 2026-11-30 numbers)")
fi

say "writing the report"
args=(--out "$out" --device "$device" --backends none --build-status "$build_status"
      --build-seconds "$build_seconds" --cmake-args "$cmake_args" "${size_args[@]}"
      --tests-xml "$out/tests-llamacpp.xml" --tests-xml "$out/tests-transformers.xml")
for name in llamacpp transformers; do args+=(--include "$parts/$name/gpu_check.json"); done
for line in "${not_done[@]}"; do args+=(--not-done "$line"); done
env "${llama_env[@]}" "${llama_py[@]}" -m benchmarks.gpu.check "${args[@]}"
rc=$?
rm -rf "$models" "$parts"  # their results are in the report
say "done (report: $out/gpu_check.md)"
exit $rc
