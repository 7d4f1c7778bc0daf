"""`specchat llama-server`: llama.cpp's own server on a model pair, with no path typed.

The pair resolves as everywhere else (catalog name, file, `default`); with a draft model the
server always gets `--spec-type draft-simple` (without it this llama.cpp loads the draft and
never drafts) and the draft length from the settings. `--baseline` starts the same target alone
on the next port, the target-only rate a reply's speedup needs. Each server's output goes to a
log file; `Servers` starts them, waits until each answers, and stops every one it started.
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from specchat.catalog.catalog import resolve_model
from specchat.choices import DraftChoice
from specchat.errors import SpecchatError
from specchat.exposure import check_host
from specchat.native import llama_tools

READY_S = 600.0
"""How long a server may take to load its models (a large target from a slow disk)."""


@dataclass(frozen=True)
class ServerPlan:
    """What to start: the server binary, the pair, and how it serves."""

    binary: Path
    target: Path
    draft: Path | None
    """A draft model, or None (then `ngram` says whether it drafts by n-gram lookup)."""
    ngram: bool = False
    k: int = 3
    slots: int = 1
    ctx: int = 4096
    """Tokens of context per slot (llama-server divides its -c among the slots)."""
    host: str = "127.0.0.1"
    port: int = 8080
    threads: int | None = None
    extra: tuple[str, ...] = ()

    def args(self, port: int, speculate: bool = True) -> list[str]:
        args = [str(self.binary), "-m", str(self.target), "--host", self.host, "--port",
                str(port), "-np", str(self.slots), "-c", str(self.ctx * self.slots)]
        if self.threads:
            args += ["-t", str(self.threads)]
        if speculate and self.draft is not None:
            args += ["-md", str(self.draft), "--spec-type", "draft-simple",
                     "--spec-draft-n-max", str(self.k), "--spec-draft-n-min", "0"]
        elif speculate and self.ngram:
            args += ["--spec-type", "ngram-simple", "--spec-draft-n-max", str(self.k)]
        return args + list(self.extra)

    def url(self, port: int) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{port}"


def plan(binary: Path, target: str, draft: str, k: int, slots: int, ctx: int, host: str,
         port: int, expose: bool, threads: int | None = None,
         extra: tuple[str, ...] = ()) -> ServerPlan:
    """The plan for these choices, or one line saying why not (a model missing, a drafter a
    llama-server cannot run, an address beyond this machine without --expose)."""
    check_host(host, expose, "llama-server")
    try:
        choice = DraftChoice.parse(draft)
    except ValueError as exc:
        raise SpecchatError(f"--draft {draft}: {exc}") from None
    if choice.combined:
        raise SpecchatError(f"--draft {draft}: a llama-server drafts with a model or with "
                            "n-gram lookup, not both; give one")
    files = [resolve_model(target, "target")] + (
        [] if choice.model is None else [resolve_model(choice.model, "draft")])
    for path in files:
        if not path.is_file():
            raise SpecchatError(f"{path}: no such model file")
        refuse_foreign(binary, path, "--target" if path == files[0] else "--draft")
    return ServerPlan(binary, files[0], files[1] if len(files) > 1 else None, choice.ngram,
                      k, slots, ctx, host, port, threads, extra)


def refuse_foreign(binary: Path, model: Path, flag: str) -> None:
    """One line, before anything starts, where `model` needs specchat's patched llama.cpp (a
    file `specchat models optimize` made) and `binary` is another build, which cannot load it."""
    from specchat.catalog.gguf_file import needs_specchat_llama

    needs = needs_specchat_llama(model)
    own = llama_tools.built(("llama-server",))
    if needs and (own is None or binary.resolve().parent != own.resolve()):
        raise SpecchatError(
            f"{model.name} needs specchat's build of llama.cpp ({needs}), and llama-server "
            f"{binary} is another: unset SPECCHAT_LLAMA_SERVER (specchat builds its own), or give "
            f"{flag} the original (`specchat models list` shows both)")


def port_free(host: str, port: int) -> None:
    """One line when the port is taken, before anything starts."""
    try:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as exc:
        raise SpecchatError(f"port {port} on {host} is taken ({exc.strerror or exc}): give "
                            "--port") from None


@dataclass
class Servers:
    """Started servers, each with its log; `stop` ends every one."""

    logs: Path
    procs: list[tuple[str, subprocess.Popen[bytes], Path]] = field(default_factory=list)

    def start(self, name: str, args: list[str], url: str) -> None:
        log = self.logs / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        self.procs.append((name, proc, log))
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
                raise SpecchatError(f"{name} exited with {proc.returncode} while loading: "
                                    f"{tail[0][:200]} (log: {log})")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise SpecchatError(f"{name} did not answer within {READY_S:.0f} s (log: {log})")

    def exited(self) -> str | None:
        """The first server that stopped by itself, in one line, or None."""
        for name, proc, log in self.procs:
            if proc.poll() is not None:
                return f"{name} stopped (exit {proc.returncode}; log: {log})"
        return None

    def stop(self) -> None:
        for _, proc, _ in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for _, proc, _ in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    @property
    def pids(self) -> list[int]:
        return [proc.pid for _, proc, _ in self.procs]


def start_pair(p: ServerPlan, baseline: bool, logs: Path) -> tuple[Servers, str]:
    """The speculating server (and the target alone on the next port), answering; and the
    `specchat` line that chats with them. Nothing is left running when one fails."""
    port_free(p.host, p.port)
    if baseline:
        port_free(p.host, p.port + 1)
    servers = Servers(logs)
    try:
        servers.start("llama-server", p.args(p.port), p.url(p.port))
        if baseline:
            servers.start("llama-server-baseline", p.args(p.port + 1, speculate=False),
                          p.url(p.port + 1))
    except BaseException:
        servers.stop()
        raise
    line = f"specchat --server {p.url(p.port)}"
    return servers, line + (f" --baseline-server {p.url(p.port + 1)}" if baseline else "")
