"""How far each Q4_0 rounding leaves a model's matrices from its own weights: llama.cpp's (the
block's largest weight on the grid's end) against the least-squares scales `models optimize`
fits, as squared error over the weights' own squares, with the seconds each took.

    .venv/bin/python -m benchmarks.block_scales --target qwen2.5-coder-1.5b-instruct-q4_k_m
"""

from __future__ import annotations

import time

import gguf
import numpy as np
from gguf.quants import dequantize, quantize

from benchmarks import arguments
from specchat.catalog.catalog import resolve_model
from specchat.optimize.block_scales import q4_0_rows

MATRICES = ("blk.3.attn_v.weight", "blk.3.ffn_gate.weight", "blk.3.ffn_down.weight",
            "blk.20.ffn_down.weight", "output.weight")
Q4_0 = gguf.GGMLQuantizationType.Q4_0


def relative_error(rounded: np.ndarray, weights: np.ndarray) -> float:
    return float(((rounded - weights) ** 2).sum() / (weights ** 2).sum())


def main() -> None:
    ap = arguments.parser(__doc__)
    ap.add_argument("--matrices", default=",".join(MATRICES),
                    help="comma-separated tensor names (default: %(default)s)")
    args = ap.parse_args()
    path = resolve_model(arguments.settings(args).models.target, "target")
    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    print(f"{path.name}: squared error / squared weights, Q4_0 from the file's own weights")
    print("| matrix | its type | llama.cpp's scales | least squares | ratio | seconds (llama.cpp's "
          "in numpy / least squares) |")
    print("|---|---|---|---|---|---|")
    for name in args.matrices.split(","):
        t = tensors[name]
        weights = dequantize(t.data, t.tensor_type).astype(np.float32)
        t0 = time.perf_counter()
        theirs = dequantize(quantize(weights, Q4_0), Q4_0)
        t1 = time.perf_counter()
        ours = dequantize(q4_0_rows(weights), Q4_0)
        t2 = time.perf_counter()
        a, b = relative_error(theirs, weights), relative_error(ours, weights)
        print(f"| {name} {list(weights.shape)} | {t.tensor_type.name} | {a:.5f} | {b:.5f} | "
              f"{b / a:.3f} | {t1 - t0:.2f} / {t2 - t1:.2f} |")


if __name__ == "__main__":
    main()
