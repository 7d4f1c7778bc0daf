#!/usr/bin/env bash
# Make what benchmarks/gpu/check.sh needs on a GPU machine with no network, in one ignored folder
# (default .gpu/): the llama-cpp-python source with patches/llama.cpp applied (as install.sh
# builds it), trimmed to what a standalone CUDA build of llama.cpp and its tools compiles, and
# the pure-Python wheels specchat needs beyond what such a machine has (torch, transformers,
# numpy, scipy, pytest and hypothesis are expected there).
#
#   benchmarks/gpu/prepare.sh [DIR]        (or: make gpu-bundle)
#
# The same version and patches always give the same tarball (sorted names, fixed times, gzip -n).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir="${1:-.gpu}"
version=$(sed -n 's/^local = \["llama-cpp-python==\([^"]*\)"\]/\1/p' pyproject.toml)  # the one pin
py="${PYTHON:-python3}"
mkdir -p "$dir/wheels"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$("$py" -m specchat.native.llama_tools unpack "$version" "$work")  # patched, as install.sh's wheel
v="$root/vendor/llama.cpp"
# what a CUDA (or CPU) build of llama.cpp, its tools and the Python package never reads: docs,
# tests, the vocabulary files of llama.cpp's tests, converters, every other GPU backend, the web
# UI's sources (the tools build without it) and the git history
rm -rf "$root"/{.git,docs,examples,tests,docker} \
  "${v:?}"/{models,docs,media,tests,benches,gguf-py,conversion,skills,ci,licenses,grammars,requirements} \
  "$v"/tools/ui/{src,tests,static} "$v"/*.py
for b in cann et hexagon hip metal musa opencl openvino sycl virtgpu vulkan webgpu zdnn zendnn; do
  rm -rf "$v/ggml/src/ggml-$b"
done
out="$dir/llama-cpp-python-$version-patched-trimmed.tar.gz"
rm -f "$dir"/llama-cpp-python-*.tar.gz
tar --sort=name --mtime='2026-01-01 00:00Z' --owner=0 --group=0 --numeric-owner \
  -C "$work" -cf - "llama_cpp_python-$version" | gzip -n -9 > "$out"
# textual and rich at the versions installed here (the tests ran with them), the rest as pinned
# by nothing but specchat's own requirements
installed() { "$py" -c "import importlib.metadata as m; print('$1==' + m.version('$1'))"; }
rm -f "$dir"/wheels/*.whl
"$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$dir/wheels" \
  "$(installed textual)" "$(installed rich)" mdit-py-plugins linkify-it-py uc-micro-py \
  platformdirs tomli_w gguf diskcache textual-plotext "plotext<6" textual-serve segno aiohttp-jinja2
echo "$out: $(du -h "$out" | cut -f1); wheels: $(ls "$dir/wheels" | wc -l) files, $(du -sh "$dir/wheels" | cut -f1)"
