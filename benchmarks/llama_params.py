"""Run Python code with llama.cpp's default model parameters changed: the GPU check's way to try
a load without mmap, without repacked CPU buffers or without host buffers through specchat's own
backend, and to run its tests and measurements that way once such a load is what works.

    python -m benchmarks.llama_params load_mode=0,use_extra_bufts=0 -m pytest tests/engine
    python -m benchmarks.llama_params no_host=1 -c "import llama_cpp; ..."

FIELDS is `name=int` pairs of `llama_model_params`, comma-separated ("" changes nothing).
"""

from __future__ import annotations

import runpy
import sys

from specchat.backends.repack import model_params


def parse(fields: str) -> dict[str, int]:
    """`name=int,...` as a dict; a name llama_model_params lacks is an error, not ignored."""
    if not fields:
        return {}
    import llama_cpp

    known = {field[0] for field in llama_cpp.llama_model_params._fields_}
    out: dict[str, int] = {}
    for pair in filter(None, fields.split(",")):
        name, _, value = pair.partition("=")
        if name not in known:
            raise SystemExit(f"llama_params: llama_model_params has no field {name!r}")
        out[name] = int(value)
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("-m", "-c"):
        print(__doc__, file=sys.stderr)
        return 2
    # "" imports nothing: the check's report runs where llama.cpp did not build
    with model_params(**parse(argv[0])):
        if argv[1] == "-m":
            sys.argv = [argv[2], *argv[3:]]
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *argv[3:]]
            exec(compile(argv[2], "<llama_params -c>", "exec"), {"__name__": "__main__"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
