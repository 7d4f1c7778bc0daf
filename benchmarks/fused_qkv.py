"""One attention input matrix a layer against three: a model's passes with its Q, K and V
stacked into llama.cpp's fused `attn_qkv` (specchat/optimize/fused_qkv.py, what `models
optimize` writes) and with them apart, side by side in one process, and whether the logits are
the same bits (a benchmark, not a test; medians of --repeats passes of each size, the two files
in turn, the order swapped every pass).

    .venv/bin/python -m benchmarks.fused_qkv --target default
    .venv/bin/python -m benchmarks.fused_qkv --target qwen2.5-coder-0.5b-instruct-q4_k_m.cpu-q4_0

The file --target names is compared with its other form, written to a temporary folder: split
where it is fused, fused where it is not.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import arguments
from specchat.backends.llamacpp import LlamaCppBackend
from specchat.catalog.catalog import resolve_model
from specchat.optimize.fused_qkv import can_fuse_qkv, write_fused_qkv

SIZES = (1, 2, 3, 4, 5, 8)
TEXT = 'def is_prime(n):\n    """Return True if n is prime."""\n    if n < 2:\n        return False\n'


def write_split_qkv(source: Path, out: Path) -> None:
    """`source` with each fused `attn_qkv` split back into Q, K and V (rows n_embd_q, then the
    K and V heads' rows, as llama.cpp's fused path reads them)."""
    import gguf

    from specchat.catalog.gguf_file import copy_gguf

    reader = gguf.GGUFReader(source)
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    n_embd = int(reader.fields[f"{arch}.embedding_length"].contents())
    heads = int(reader.fields[f"{arch}.attention.head_count"].contents())
    kv_heads = int(reader.fields[f"{arch}.attention.head_count_kv"].contents())
    kv = n_embd // heads * kv_heads
    bounds = np.cumsum([0, n_embd, kv, kv])
    tensors = []
    for t in reader.tensors:
        if ".attn_qkv." not in t.name:
            tensors.append((t.name, t.data, t.tensor_type))
            continue
        for part, lo, hi in zip("qkv", bounds, bounds[1:]):
            tensors.append((t.name.replace(".attn_qkv.", f".attn_{part}."), t.data[lo:hi],
                            t.tensor_type))
    copy_gguf(reader, out, tensors)


def main() -> None:
    ap = arguments.parser(__doc__, repeats=25)
    args = ap.parse_args()
    settings = arguments.settings(args)
    path = resolve_model(settings.models.target, "target")
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / f"{path.stem}.other.gguf"
        fused_first = not can_fuse_qkv(path)
        (write_split_qkv if fused_first else write_fused_qkv)(path, other)
        fused, split = (path, other) if fused_first else (other, path)
        threads = settings.models.threads or 2
        models = {"split": LlamaCppBackend(split, n_threads=threads, n_ctx=1024),
                  "fused": LlamaCppBackend(fused, n_threads=threads, n_ctx=1024)}
        ids = models["split"].tokenize(TEXT)
        rows = {name: m.eval(ids, 0) for name, m in models.items()}
        same = np.array_equal(rows["split"], rows["fused"])
        print(f"{path.name}, {threads} threads, medians of {args.repeats} passes, "
              f"after {len(ids)} tokens\n")
        print("| tokens in the pass | split Q, K, V: ms | fused: ms | fused / split | same bits |")
        print("|---|---|---|---|---|")
        for n in SIZES:
            times: dict[str, list[float]] = {name: [] for name in models}
            out: dict[str, np.ndarray] = {}
            order = list(models)
            for r in range(args.repeats):
                for name in order if r % 2 == 0 else order[::-1]:
                    model = models[name]
                    model.truncate(len(ids))
                    t0 = time.perf_counter()
                    out[name] = model.eval(ids[:n], 0)
                    times[name].append(time.perf_counter() - t0)
            split_ms, fused_ms = (1e3 * statistics.median(times[k]) for k in ("split", "fused"))
            equal = np.array_equal(out["split"], out["fused"])
            same &= equal
            print(f"| {n} | {split_ms:.2f} | {fused_ms:.2f} | {fused_ms / split_ms:.3f} | {equal} |")
        for model in models.values():
            model.close()
    print(f"\nthe same logits in every pass: {same}")


if __name__ == "__main__":
    main()
