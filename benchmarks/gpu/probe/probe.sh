#!/usr/bin/env bash
# Every way of loading a model on the GPU that could matter, each in its own process with a
# native backtrace on a crash: llama.cpp from C (no Python), from Python as specchat loads it,
# and beside what crashed it on an H200 (torch loaded first in the process; docs/gpu.md), plus
# the CUDA calls of a load without llama.cpp. benchmarks/gpu/check.sh runs it after its build:
#   SITE=DIR MODELS=DIR bash benchmarks/gpu/probe/probe.sh --out DIR
# SITE holds the built llama_cpp package (its libraries in llama_cpp/lib, headers in include/),
# MODELS the check's random-weight pair (the 7B-shaped target is loaded too where it is there).
# Writes probe.log; leaves segv_bt.so in /tmp/specchat-probe-run for the check's own children.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd); [ -x ./install.sh ] || { echo "run from the project root"; exit 2; }
out="${OUT:-gpu-probe}"; [ "${1:-}" = --out ] && out=$2
site=${SITE:?SITE: the folder holding the built llama_cpp package}
models=${MODELS:-}
mkdir -p "$out"; out=$(cd "$out" && pwd)
exec > >(tee "$out/probe.log") 2>&1
t0=$SECONDS
say() { echo; echo "#### [$((SECONDS - t0))s] $*"; }
py=${PYTHON:-python3}; [ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
work=/tmp/specchat-probe-run; mkdir -p "$work"; src=$here/probe_src
lib=$site/llama_cpp/lib

say "facts (before anything changes the environment)"
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-<unset>} CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-<unset>} LD_PRELOAD=${LD_PRELOAD:-<unset>}"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,mig.mode.current --format=csv 2>&1 | head -3
nvidia-smi -q 2>/dev/null | grep -iE 'addressing mode|virtualization mode|persistence mode|confidential|CUDA Version' | head
nvcc --version 2>&1 | tail -2
ldconfig -p | grep -E 'libcuda\.so|libcudart|libcublas|libggml|libllama|libstdc\+\+' | head -12
"$py" -c 'import torch, os; print("torch", torch.__version__, torch.version.cuda, os.path.dirname(torch.__file__))' 2>&1 | tail -1
"$py" -m pip list 2>/dev/null | grep -iE '^nvidia|^torch |llama|^gguf' | head -20
grep -m1 -o -w -E 'avx512(f|bw|vl|dq|cd)|amx_tile|avx2|fma|f16c|bmi2' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
command -v gdb cuda-gdb addr2line || true

say "helpers: segv_bt.so (native backtrace on a crash), repro (the load in C), cuda_sanity (the CUDA calls of a load)"
gcc -O1 -g -fPIC -shared -o "$work/segv_bt.so" "$src/segv_bt.c" -ldl && echo "segv_bt.so ok"
gcc -O1 -g "$src/repro.c" -I"$site/include" -L"$lib" -lllama -lggml -lggml-base -Wl,-rpath,"$lib" \
  -o "$work/repro" && echo "repro ok"
stubs=""; for s in /usr/local/cuda/lib64/stubs /usr/local/cuda/targets/x86_64-linux/lib/stubs; do [ -d "$s" ] && stubs="-L$s"; done
command -v nvidia-smi >/dev/null && nvcc -arch=sm_90 -cudart shared "$src/cuda_sanity.cu" -o "$work/cuda_sanity" $stubs -lcuda \
  && echo "cuda_sanity ok"
"$py" -m benchmarks.gpu.models "$work/m" --small >/dev/null 2>&1
small=$(ls "$work"/m/small-draft*.gguf | head -1)
big=$(ls "${models:-/nonexistent}"/*7b*.gguf 2>/dev/null | head -1)
echo "models: $small ${big:-(no 7B-shaped target)}"

say "what the CUDA library links to"
readelf -d "$lib"/libggml-cuda.so 2>/dev/null | grep -E 'NEEDED|RUNPATH|RPATH'
ldd "$lib"/libllama.so 2>&1 | grep -E 'cuda|cublas|ggml|stdc|not found'
nm -D --defined-only "$lib"/libggml-cuda.so 2>/dev/null | c++filt | grep -cE ' std::' | sed 's/^/std:: symbols libggml-cuda.so defines: /'
[ -x "$work/cuda_sanity" ] && { say "cuda_sanity (toolkit libcudart, no llama.cpp)"; timeout 30 "$work/cuda_sanity" "$small"; echo "exit $?"; }

noise='llama_graph_n_input_tensors|graph_reserve:|resolve_fused_ops|create_tensor: loading'
run() {  # label, env assignments..., command...
  local label=$1; shift; say "$label"
  env LD_PRELOAD="$work/segv_bt.so" "$@" 2>&1 | grep -vE "$noise" | tail -n 40
  last_rc=${PIPESTATUS[0]}; echo "== $label: exit $last_rc"
}
R="$work/repro"
run "C: all layers on the GPU"            timeout 25 "$R" "$small" 999; c_all=$last_rc
run "C: no layer on the GPU"              timeout 25 "$R" "$small" 0
run "C: no CUDA device at all"            CUDA_VISIBLE_DEVICES= timeout 25 "$R" "$small" 999
run "C: no mmap (pinned uploads)"         timeout 25 "$R" "$small" 999 nommap
run "C: GGML_CUDA_NO_PINNED=1"            GGML_CUDA_NO_PINNED=1 timeout 25 "$R" "$small" 999
run "C: LD_LIBRARY_PATH unset"            LD_LIBRARY_PATH= timeout 25 "$R" "$small" 999
[ -n "$big" ] && run "C: the 7B-shaped target, all layers" timeout 60 "$R" "$big" 999
load='from benchmarks.gpu.load import main; main()'  # after whatever a variant runs first
export PYTHONPATH="$site:$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
run "Python as specchat"                  timeout 30 "$py" -c "$load" "$small" 999
run "Python, llama.cpp logging to stderr" SPECCHAT_LLAMA_LOG=1 timeout 30 "$py" -c "$load" "$small" 999
run "Python, the model thread adopted (main thread)" timeout 30 "$py" -c "from specchat import model_thread; model_thread.adopt(); $load" "$small" 999
run "Python, a GGUF written in this process first" timeout 30 "$py" -c "from pathlib import Path; from benchmarks.gpu.models import write_model, SMALL_DRAFT; write_model(Path('$work/w.gguf'), SMALL_DRAFT); $load" "$work/w.gguf" 999
[ -n "$big" ] && run "Python, the 7B-shaped target as the check loads it (n_ctx 4096)" timeout 60 "$py" -c "$load" "$big" 999 4096
run "Python, torch imported first (no CUDA use)" timeout 45 "$py" -c "import torch; $load" "$small" 999
run "Python, torch's CUDA first"          timeout 45 "$py" -c "import torch; torch.zeros(1, device='cuda'); $load" "$small" 999
run "Python, llama.cpp's libraries first, then torch's CUDA" timeout 45 "$py" -c "import llama_cpp, torch; torch.zeros(1, device='cuda'); $load" "$small" 999
run "Python, torch's CUDA first, LD_LIBRARY_PATH unset" LD_LIBRARY_PATH= timeout 45 "$py" -c "import torch; torch.zeros(1, device='cuda'); $load" "$small" 999
say "LD_DEBUG: what the load binds its C++ runtime symbols to, torch first"
LD_DEBUG=bindings timeout 45 "$py" -c "import torch; $load" "$small" 999 2>&1 \
  | grep -E "binding file .*lib(llama|ggml)[^ ]* .* to .*: normal symbol .*(St6locale|regex|codecvt|ctype)" \
  | grep -vE " to [^ ]*/(libllama\.so|libstdc\+\+\.so[^ ]*) " | sed 's/^ *[0-9]*:[[:space:]]*//' | sort -u | head -20
echo "(lines above: llama.cpp's C++ runtime symbols bound neither to libllama nor to libstdc++; none is the expected case)"
say "kernel log"; dmesg 2>/dev/null | grep -iE 'segfault|general protection|NVRM|Xid' | tail -15
dbg=$(command -v gdb || command -v cuda-gdb || true)
if [ "${c_all:-1}" != 0 ] && [ -n "$dbg" ]; then  # a debugger's backtrace only where the plain C load failed
  say "$dbg backtrace"; timeout 60 "$dbg" -q -batch -ex run -ex "bt 40" --args "$R" "$small" 999 2>&1 | tail -60
fi
say "done"
