"""Re-lay a GGUF model in one weight type with llama.cpp's own quantizer.

`llama_model_quantize` is the function the `llama-quantize` tool wraps, here called through the
installed llama-cpp-python (the same vendored source, no second build). Every matrix gets the
layout's type (`pure`: no k-quant mixture), requantizing weights that were already quantized.
Progress comes from the quantizer's own per-tensor log line (`[  12/ 338] name ...`).
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from pathlib import Path

from specchat.catalog.layout import Layout
from specchat.errors import ModelFileError

_TENSOR_LINE = re.compile(rb"\[\s*(\d+)/\s*(\d+)\]")

Progress = Callable[[int, int], None]
"""Called with (tensors done, tensors in all)."""


def quantize(source: Path, out: Path, layout: Layout, progress: Progress | None = None,
             threads: int = 0) -> None:
    """Write `source` re-laid in `layout` to `out`; ModelFileError naming the file if
    llama.cpp refuses it (the partial output is removed)."""
    import llama_cpp

    from specchat.backends.llamacpp import ensure_backend, quiet_log

    ensure_backend()
    params = llama_cpp.llama_model_quantize_default_params()
    params.nthread = threads
    params.ftype = layout.ftype
    params.allow_requantize = True
    params.pure = True
    lines: list[bytes] = []

    @llama_cpp.llama_log_callback
    def on_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        match = _TENSOR_LINE.match(text)
        if match and progress is not None:
            progress(int(match.group(1)), int(match.group(2)))
        elif level == 4:  # GGML_LOG_LEVEL_ERROR
            lines.append(text)

    llama_cpp.llama_log_set(on_log, ctypes.c_void_p(0))
    try:
        failed = llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(),
                                                ctypes.byref(params))
    finally:
        quiet_log()
    if failed:
        out.unlink(missing_ok=True)
        said = b" ".join(line.strip() for line in lines).decode("utf-8", "replace")
        raise ModelFileError(f"llama.cpp could not re-lay {source.name} as {layout.name}"
                             f"{': ' + said if said else ''}")
