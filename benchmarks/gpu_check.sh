#!/usr/bin/env bash
# The GPU check's entry where a device session looks for it; the kit is benchmarks/gpu/.
exec "$(dirname "$0")/gpu/check.sh" "$@"
