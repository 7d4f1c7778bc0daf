"""One model loaded through specchat's backend and three tokens evaluated: the one way the GPU
probe (benchmarks/gpu/probe) and the GPU check try a load, in a process of its own each time.

    python -m benchmarks.gpu.load MODEL.gguf LAYERS [N_CTX]
    python -c "import torch; from benchmarks.gpu.load import main; main()" MODEL LAYERS
"""

from __future__ import annotations

import sys

from specchat.backends.llamacpp import LlamaCppBackend


def main() -> None:
    """Load `sys.argv[1]` with `sys.argv[2]` layers on the GPU (and `sys.argv[3]` tokens of
    context, 256 by default), evaluate three tokens, and say so."""
    path, layers = sys.argv[1], int(sys.argv[2])
    n_ctx = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    model = LlamaCppBackend(path, n_ctx=n_ctx, n_gpu_layers=layers)
    print("loaded; offloaded", model.n_gpu_layers, "rows", model.eval([300, 301, 302], 0).shape)


if __name__ == "__main__":
    main()
