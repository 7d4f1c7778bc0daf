"""Where one pass of a model spends its time, node by node of llama.cpp's graph (ggml's own op
timings, no perf needed): a context whose eval callback asks for every node makes the scheduler
compute the graph one node at a time, and the time from a node's question to its answer is that
node's compute (a benchmark, not a test).

    .venv/bin/python -m benchmarks.op_profile --target default --sizes 1,4,5 --repeats 20
    .venv/bin/python -m benchmarks.op_profile --target qwen2.5-coder-0.5b-instruct-q4_k_m.cpu-q4_0

Nodes are grouped by what they compute: the output layer (`result_output`, the vocabulary's
logits), each kind of weight matrix (attention q/k/v/o, feed-forward gate/up/down), attention
itself, and the rest (norms, rope, adds). Computing node by node adds a thread wake-up per node,
so the table also gives a plain pass of the same size (no callback) beside the sum of the nodes.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import re
import statistics
import time
from pathlib import Path

from benchmarks import arguments

PROMPT = "Write a Python module that implements a binary search tree with insert and delete."


class _Tensor(ctypes.Structure):
    """The head of ggml.h's `struct ggml_tensor` up to its name (GGML_MAX_DIMS 4,
    GGML_MAX_OP_PARAMS 64, GGML_MAX_SRC 10, GGML_MAX_NAME 64)."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int),
                ("op_params", ctypes.c_int32 * 16), ("flags", ctypes.c_int32),
                ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p),
                ("name", ctypes.c_char * 64)]


GROUPS = [
    ("output layer (vocabulary logits)", re.compile(r"^result_output")),
    ("attention q/k/v matrices", re.compile(r"^(Qcur|Kcur|Vcur)-\d+$")),
    ("feed-forward gate and up", re.compile(r"^ffn_(gate|up)-\d+$")),
    ("feed-forward down", re.compile(r"^ffn_out-\d+$")),
    ("attention (flash)", re.compile(r"^__fattn__|^kqv_out|^fattn")),
]
"""Node names (llama.cpp's graph builder) -> what they compute; a node that fits none is
grouped by its op ('rest: MUL', ...)."""


def group(name: str, op: str) -> str:
    for label, pattern in GROUPS:
        if pattern.search(name):
            return label
    if op == "MUL_MAT":  # the one product the qwen2 builder leaves unnamed ('node_26', ...)
        return "attention output matrix"
    return f"rest: {op}"


class NodeClock:
    """The eval callback: ask for every node, time each from question to answer."""

    def __init__(self, ggml: ctypes.CDLL) -> None:
        self.op_desc = ggml.ggml_op_desc
        self.op_desc.restype, self.op_desc.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
        self.started = 0.0
        self.totals: dict[str, float] = collections.defaultdict(float)
        self.recording = False

    def __call__(self, tensor: int, ask: bool, _user: int) -> bool:
        now = time.perf_counter()
        if ask:
            self.started = now
            return True
        if self.recording:
            t = _Tensor.from_address(tensor)
            self.totals[group(t.name.decode(), self.op_desc(tensor).decode())] += now - self.started
        return True


def run(args: argparse.Namespace) -> None:
    import llama_cpp

    from specchat.catalog.catalog import resolve_model

    options = arguments.settings(args).models
    path = resolve_model(options.target, "target")  # any model: --target names it
    lib = Path(llama_cpp.__file__).parent / "lib"
    ggml = ctypes.CDLL(str(lib / "libggml-base.so"))
    clock = NodeClock(ggml)
    callback = llama_cpp.ggml_backend_sched_eval_callback(clock)

    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)
    vocab = llama_cpp.llama_model_get_vocab(model)
    text = PROMPT.encode()
    buf = (llama_cpp.llama_token * 512)()
    n_prompt = llama_cpp.llama_tokenize(vocab, text, len(text), buf, 512, True, True)
    prompt = list(buf[:n_prompt])
    threads = arguments.threads(options)

    def context(timed: bool) -> llama_cpp.llama_context_p:
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx, cparams.n_batch, cparams.n_ubatch = 1024, 512, 512
        cparams.n_threads = cparams.n_threads_batch = threads
        if timed:
            cparams.cb_eval = callback
        return llama_cpp.llama_init_from_model(model, cparams)

    def decode(ctx: llama_cpp.llama_context_p, tokens: list[int], pos: int) -> None:
        batch = llama_cpp.llama_batch_init(len(tokens), 0, 1)
        for i, tok in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos + i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, True  # every row's logits, as verify needs
        batch.n_tokens = len(tokens)
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        llama_cpp.llama_batch_free(batch)

    plain, timed = context(False), context(True)
    for ctx in (plain, timed):
        decode(ctx, prompt, 0)
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        tokens = (prompt * 16)[:n]
        plain_ms: list[float] = []
        timed_ms: list[float] = []
        clock.totals.clear()
        for r in range(args.repeats + 2):  # two passes of warm-up
            for ctx, out in ((plain, plain_ms), (timed, timed_ms)):
                llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(ctx), 0, n_prompt, -1)
                clock.recording = ctx is timed and r >= 2
                t0 = time.perf_counter()
                decode(ctx, tokens, n_prompt)
                if r >= 2:
                    out.append((time.perf_counter() - t0) * 1000)
        shares = {k: v * 1000 / args.repeats for k, v in clock.totals.items()}
        rows.append((n, statistics.median(plain_ms), statistics.median(timed_ms), shares))
        print(f"{n} tokens: plain {rows[-1][1]:.1f} ms, node by node {rows[-1][2]:.1f} ms",
              flush=True)
    print_table(path.name, rows, args.top)


def print_table(name: str, rows: list[tuple[int, float, float, dict[str, float]]], top: int) -> None:
    totals: dict[str, float] = collections.defaultdict(float)
    for *_, shares in rows:
        for g, ms in shares.items():
            totals[g] += ms
    names = sorted(totals, key=totals.__getitem__, reverse=True)[:top]
    print(f"\n{name}: ms a pass by node group (share of the nodes' sum)\n")
    print("| nodes | " + " | ".join(f"{n} tokens" for n, *_ in rows) + " |")
    print("|---" * (len(rows) + 1) + "|")
    for g in [*names, "everything else"]:
        cells = []
        for _, _, _, shares in rows:
            whole = sum(shares.values()) or 1.0
            ms = shares.get(g, 0.0) if g != "everything else" else whole - sum(
                shares.get(x, 0.0) for x in names)
            cells.append(f"{ms:.1f} ({ms / whole:.0%})")
        print(f"| {g} | " + " | ".join(cells) + " |")
    print("| **sum of the nodes, ms** | " + " | ".join(
        f"{sum(s.values()):.1f}" for *_, s in rows) + " |")
    print("| **a plain pass, ms** | " + " | ".join(f"{p:.1f}" for _, p, _, _ in rows) + " |")


def main() -> None:
    ap = arguments.parser(__doc__, models=arguments.CPU_ONLY, repeats=20)
    ap.add_argument("--sizes", default="1,4,5", help="tokens a pass, comma-separated")
    ap.add_argument("--top", type=int, default=8, help="node groups shown")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
