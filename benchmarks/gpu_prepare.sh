#!/usr/bin/env bash
# Make what benchmarks/gpu_check.sh needs on a GPU machine with no network, in one ignored folder
# (default .gpu/): the llama-cpp-python source trimmed to what a CUDA build compiles, and the
# pure-Python wheels specchat needs beyond what such a machine has (torch, transformers, numpy,
# scipy, pytest and hypothesis are expected there).
#
#   benchmarks/gpu_prepare.sh [DIR]        (or: make gpu-bundle)
#
# The same version always gives the same tarball (sorted names, fixed times, gzip -n).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.gpu}"
version=0.3.36
py="${PYTHON:-python3}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/specchat/src"  # the sdist, as the llama.cpp benchmarks keep it
mkdir -p "$dir/wheels" "$cache"
sdist="$cache/llama_cpp_python-$version.tar.gz"
[ -f "$sdist" ] || "$py" -m pip download --quiet --no-deps --no-binary :all: \
  "llama-cpp-python==$version" -d "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar xzf "$sdist" -C "$work"
root="$work/llama_cpp_python-$version"
v="$root/vendor/llama.cpp"
# what a CUDA (or CPU) build of the Python package never reads: docs, tests, examples, the
# vocabulary files of llama.cpp's tests, tools, converters, every other GPU backend, and the
# git history of the vendored llama.cpp
rm -rf "$root"/{.git,docs,examples,tests,docker} \
  "${v:?}"/{models,docs,media,tests,benches,examples,pocs,app,tools,gguf-py,conversion,scripts,skills,ci,licenses,grammars,requirements} \
  "$v"/*.py
for b in cann et hexagon hip metal musa opencl openvino sycl virtgpu vulkan webgpu zdnn zendnn; do
  rm -rf "$v/ggml/src/ggml-$b"
done
out="$dir/llama-cpp-python-$version-trimmed.tar.gz"
tar --sort=name --mtime='2026-01-01 00:00Z' --owner=0 --group=0 --numeric-owner \
  -C "$work" -cf - "llama_cpp_python-$version" | gzip -n -9 > "$out"
# textual and rich at the versions installed here (the tests ran with them), the rest as pinned
# by nothing but specchat's own requirements
installed() { "$py" -c "import importlib.metadata as m; print('$1==' + m.version('$1'))"; }
rm -f "$dir"/wheels/*.whl
"$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$dir/wheels" \
  "$(installed textual)" "$(installed rich)" mdit-py-plugins linkify-it-py uc-micro-py \
  platformdirs tomli_w gguf diskcache textual-plotext "plotext<6"
echo "$out: $(du -h "$out" | cut -f1); wheels: $(ls "$dir/wheels" | wc -l) files, $(du -sh "$dir/wheels" | cut -f1)"
