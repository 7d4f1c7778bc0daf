"""llama.cpp's RPC backend: serve this machine's device to other machines, and put a model's
layers on such servers.

Both halves use the ggml library llama-cpp-python already loaded (install.sh builds it with
GGML_RPC), so a server needs no second build. ggml's RPC client aborts the process when a
server cannot be reached or dies in the middle of a call: servers are probed before they are
used (a clear error names the one that is down), and a model on servers runs in a child
process (backends/isolated.py) that `on_abort` lets say why it ends.
"""

from __future__ import annotations

import ctypes
import functools
import re
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import llama_cpp

from specchat.cpu import default_threads
from specchat.errors import SpecchatError
from specchat.exposure import check_host, is_loopback

_CPU, _GPU, _IGPU = 0, 1, 2  # enum ggml_backend_dev_type
_connected: dict[str, list[int]] = {}
"""Endpoints registered in this process -> their device handles (ggml keeps one connection
per endpoint, so each is registered once)."""


class RemoteError(SpecchatError):
    """An RPC server cannot be used: not answering, or not a ggml RPC server."""


def _lib(stem: str) -> ctypes.CDLL:
    """The copy of a ggml library that llama.cpp itself loaded, by the name it was linked
    against: a wheel holds libX.so, libX.so.0 and libX.so.0.N as copies, and opening another
    copy would load a second ggml with its own state (its own abort callback, its own
    registry)."""
    folder = Path(llama_cpp.__file__).parent / "lib"
    for name in (f"{stem}.so.0", f"{stem}.0.dylib", f"{stem}.dylib", f"{stem}.so"):
        if (folder / name).exists():
            return ctypes.CDLL(str(folder / name))
    raise OSError(f"{stem} is not in {folder}")


@functools.cache
def _ggml() -> tuple[ctypes.CDLL, ctypes.CDLL, ctypes.CDLL]:
    base, ggml = _lib("libggml-base"), _lib("libggml")
    try:
        rpc = _lib("libggml-rpc")
    except OSError:
        raise SpecchatError("this llama.cpp build has no RPC backend: run ./install.sh again "
                            "(it builds with GGML_RPC)") from None
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    for lib, fn, args, res in [
        (ggml, "ggml_backend_dev_count", [], sz), (ggml, "ggml_backend_dev_get", [sz], vp),
        (ggml, "ggml_backend_dev_by_type", [ctypes.c_int], vp),
        (ggml, "ggml_backend_register", [vp], None),
        (base, "ggml_backend_dev_type", [vp], ctypes.c_int),
        (base, "ggml_backend_dev_name", [vp], ctypes.c_char_p),
        (base, "ggml_backend_dev_description", [vp], ctypes.c_char_p),
        (base, "ggml_backend_reg_dev_count", [vp], sz),
        (base, "ggml_backend_reg_dev_get", [vp, sz], vp),
        (rpc, "ggml_backend_rpc_add_server", [ctypes.c_char_p], vp),
        (rpc, "ggml_backend_rpc_start_server",
         [ctypes.c_char_p, ctypes.c_char_p, sz, sz, ctypes.POINTER(vp)], None),
    ]:
        f = getattr(lib, fn)
        f.argtypes, f.restype = args, res
    return base, ggml, rpc


def parse(text: str) -> list[str]:
    """The endpoints of `--rpc` (checked as HOST:PORT by settings.rpc_endpoints)."""
    return [part.strip() for part in text.split(",") if part.strip()]


def probe(endpoint: str, timeout: float = 3.0) -> None:
    """Raise RemoteError, naming the server, unless something accepts connections there."""
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise RemoteError(f"RPC server {endpoint} is not answering ({reason}): start it there "
                          "with `specchat rpc-server`") from None


def wait_for(endpoint: str, seconds: float = 20.0) -> None:
    """Wait until a server that was just started accepts connections (it says so before its
    C loop binds the port); RemoteError if it does not in time."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            probe(endpoint, timeout=1.0)
            return
        except RemoteError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def devices(endpoints: Sequence[str]) -> ctypes.Array:
    """The NULL-terminated device list for a model's params: the RPC servers' devices (each
    server probed first: ggml's client aborts the process when it cannot connect)."""
    base, ggml, rpc = _ggml()
    handles: list[int] = []
    for endpoint in endpoints:
        if endpoint not in _connected:
            probe(endpoint)
            reg = rpc.ggml_backend_rpc_add_server(endpoint.encode())
            if not reg:
                raise RemoteError(f"RPC server {endpoint}: ggml could not register it")
            ggml.ggml_backend_register(reg)
            _connected[endpoint] = [base.ggml_backend_reg_dev_get(reg, i)
                                    for i in range(base.ggml_backend_reg_dev_count(reg))]
        handles += _connected[endpoint]
    return (ctypes.c_void_p * (len(handles) + 1))(*handles, None)


def local_gpus() -> list[int]:
    """This machine's GPU devices (integrated ones when there is no discrete GPU)."""
    base, ggml, _ = _ggml()
    found: dict[int, list[int]] = {_GPU: [], _IGPU: []}
    for i in range(ggml.ggml_backend_dev_count()):
        dev = ggml.ggml_backend_dev_get(i)
        kind = base.ggml_backend_dev_type(dev)
        if kind in found:
            found[kind].append(dev)
    return found[_GPU] or found[_IGPU]


_abort_hook: list[object] = []
"""The ctypes callback ggml holds (kept alive here)."""


def on_abort(callback: Callable[[str], None]) -> None:
    """Call `callback` with ggml's message (without its source file and line) when ggml is
    about to abort the process: its RPC client does when a server dies mid-call. The process
    cannot go on after that, which is why specchat runs such models in a child process."""

    @ctypes.CFUNCTYPE(None, ctypes.c_char_p)
    def hook(message: bytes) -> None:
        text = (message or b"").decode("utf-8", "replace").strip().splitlines() or [""]
        callback(re.sub(r"^\S+:\d+: ", "", text[0]))

    base = _ggml()[0]
    base.ggml_set_abort_callback.argtypes = [type(hook)]
    base.ggml_set_abort_callback.restype = ctypes.c_void_p
    base.ggml_set_abort_callback(hook)
    _abort_hook[:] = [hook]


EXPOSED_WARNING = (
    "warning: the RPC server at {endpoint} has no authentication: anyone who can reach this "
    "port can run computations on this machine's device, read and overwrite the data in its "
    "buffers, and crash it. Use it only on a network you trust; to reach a server from "
    "elsewhere, keep it on 127.0.0.1 and tunnel: ssh -N -L {port}:127.0.0.1:{port} THIS-HOST")


def serve(host: str, port: int, threads: int | None, cache: Path | None,
          expose: bool) -> None:
    """Serve this machine's GPUs (or its CPU) until killed. Refuses any address but loopback
    unless `expose`."""
    check_host(host, expose, "the RPC server")
    base, ggml, rpc = _ggml()
    devs = local_gpus() or [ggml.ggml_backend_dev_by_type(_CPU)]
    endpoint = f"{host}:{port}"
    if not is_loopback(host):
        print(EXPOSED_WARNING.format(endpoint=endpoint, port=port), file=sys.stderr)
    try:  # the port taken is ggml's abort; say it first
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as exc:
        raise SpecchatError(f"cannot serve on {endpoint}: {exc.strerror or exc}") from None
    names = ", ".join(f"{base.ggml_backend_dev_name(d).decode()} "
                      f"({base.ggml_backend_dev_description(d).decode()})" for d in devs)
    print(f"specchat rpc-server on {endpoint}: {names}; Ctrl-C stops it", flush=True)
    if cache:
        cache.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the server loop is C: let Ctrl-C end it
    array = (ctypes.c_void_p * len(devs))(*devs)
    rpc.ggml_backend_rpc_start_server(endpoint.encode(), str(cache).encode() if cache else None,
                                      threads or default_threads(), len(devs), array)
