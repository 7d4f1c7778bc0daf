"""specchat as a user runs it: a subprocess in its own environment, the history it writes,
an RPC server, a local package index's wheels."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import psutil

QUIET_CPU = Path(__file__).parent / "quiet_cpu"
"""A folder whose sitecustomize fakes the CPU probe of a child `specchat` to a quiet machine."""


def specchat_env(tmp_path: Path, quiet_cpu: bool = False) -> dict[str, str]:
    """A user's environment with its own config, models folder and data folder (the history),
    and where the package comes from when it is not installed (a GPU check's machine).
    `quiet_cpu`: the child's CPU probe reads a quiet machine, whatever this host is doing."""
    env = {"SPECCHAT_CONFIG": str(tmp_path / "config.toml"),
           "SPECCHAT_MODELS_DIR": str(tmp_path / "models"), "PATH": "/usr/bin:/bin",
           "XDG_DATA_HOME": str(tmp_path / "data"), "HOME": str(tmp_path)}
    env |= {k: os.environ[k] for k in ("PYTHONPATH", "LD_LIBRARY_PATH") if k in os.environ}
    if quiet_cpu:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(QUIET_CPU), env.get("PYTHONPATH")]))
    return env


def offline_pip_env() -> dict[str, str]:
    """pip's settings that take every package from the wheels `./install.sh --dev` kept (its
    wheelhouse) and none from an index: no test reaches the network."""
    import pytest

    from specchat.native.llama_tools import cache_dir

    house = Path(os.environ.get("SPECCHAT_WHEEL_CACHE") or cache_dir() / "wheels") / "client"
    if not any(house.glob("hatchling-*.whl")):
        pytest.skip(f"no wheelhouse at {house}: ./install.sh --dev makes it")
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(house),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def specchat(*args: str, tmp_path: Path, stdin: str | None = None, quiet_cpu: bool = False
             ) -> subprocess.CompletedProcess[str]:
    """`specchat ARGS` as a user runs it, in `specchat_env`."""
    return subprocess.run([sys.executable, "-m", "specchat", *args], capture_output=True,
                          text=True, env=specchat_env(tmp_path, quiet_cpu), timeout=120,
                          input=stdin)


def saved_messages(db_path, role: str) -> list[tuple[str, int]]:
    """The messages of `role` as another process sees them: (content, complete), oldest
    first."""
    if not db_path.exists():
        return []
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5) as db:
        try:
            return db.execute("SELECT content, complete FROM messages WHERE role = ? "
                              "ORDER BY id", (role,)).fetchall()
        except sqlite3.OperationalError:  # the tables are not there yet
            return []


def saved_replies(db_path) -> list[tuple[str, int]]:
    """The assistant messages as another process sees them: (content, complete), oldest first."""
    return saved_messages(db_path, "assistant")


def replying(history: Path, n: int) -> None:
    """Wait until the history holds `n` replies, the last one begun."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        replies = saved_replies(history)
        if len(replies) == n and replies[-1][0]:
            return
        time.sleep(0.05)
    raise AssertionError(f"no reply {n} within 2 minutes")


def saved_reply(db_path) -> tuple[str, int] | None:
    """The newest assistant message as another process sees it: (content, complete)."""
    replies = saved_replies(db_path)
    return replies[-1] if replies else None


class RpcServer:
    """`specchat rpc-server` on a free loopback port, as a subprocess a test starts and stops."""

    def __init__(self, tmp_path: Path, threads: int = 1, port: int | None = None) -> None:
        """`port`: where one that was stopped served (a free one by default)."""
        self.port = free_port() if port is None else port
        self.endpoint = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specchat", "rpc-server", "--port", str(self.port),
             "--threads", str(threads)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=specchat_env(tmp_path))
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("specchat rpc-server on"), line
        from specchat.backends.rpc import wait_for

        wait_for(self.endpoint)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def history_path(tmp_path: Path) -> Path:
    """Where `specchat` in `specchat_env(tmp_path)` keeps its history."""
    return tmp_path / "data" / "specchat" / "history.sqlite3"


def make_wheel(folder: Path, name: str, version: str, member: str, payload: bytes) -> Path:
    pkg = name.replace("-", "_")
    wheel = folder / f"{pkg}-{version}-py3-none-any.whl"
    info = f"{pkg}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{pkg}/__init__.py", "")
        zf.writestr(member, payload)
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                     "Tag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    return wheel


def llama_server_binary() -> Path | None:
    """llama.cpp's own `llama-server`, built from the installed llama-cpp-python's vendored
    source (`./install.sh --dev` builds it), or $SPECCHAT_LLAMA_SERVER."""
    if os.environ.get("SPECCHAT_LLAMA_SERVER"):
        return Path(os.environ["SPECCHAT_LLAMA_SERVER"])
    from specchat.native.llama_tools import built

    folder = built(("llama-server",))
    return folder / "llama-server" if folder else None


class LlamaServer:
    """`llama-server -m TARGET [-md DRAFT]` on a free loopback port, started and stopped by a
    test; `url` answers once the model is loaded."""

    def __init__(self, binary: Path, target: Path, draft: Path | None = None, n_max: int = 3,
                 n_ctx: int = 1024, log: Path | None = None, slots: int = 1) -> None:
        import urllib.request

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [str(binary), "-m", str(target), "--host", "127.0.0.1", "--port", str(self.port),
                "-c", str(n_ctx * slots), "-t", "1", "-np", str(slots), "-ngl", "0"]
        if draft is not None:
            args += ["-md", str(draft), "--spec-type", "draft-simple", "-ngld", "0",
                     "--spec-draft-n-max", str(n_max),
                     "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"]
        self.log = open(log or os.devnull, "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"llama-server exited with {self.proc.returncode}: {args}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise AssertionError("llama-server did not load its model in 2 minutes")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self.log.close()


def free_port(span: int = 1) -> int:
    """A port, with the `span - 1` ports after it, that a server started next can bind.

    It is drawn from below the kernel's ephemeral range: a port the kernel handed out there
    and the test released can be taken by any outgoing connection (a browser's, a client's)
    before the server binds it, which failed a room test in CI with "port ... is taken"."""
    ports = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low = int(ports.read_text().split()[0]) if ports.is_file() else 32768
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low - span)
        if all(bindable(port + i) for i in range(span)):
            return port
    raise AssertionError("no free ports")


def bindable(port: int, reuse: bool = False) -> bool:
    """Bindable on every address, so on loopback too (no listener, no connection, and unless
    `reuse`, as a server binds with SO_REUSEADDR, no TIME_WAIT either)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse))
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _as_in_a_terminal() -> None:
    """Ctrl-C as a terminal's foreground process gets it: a shell's background job (a CI
    script started with `&`) passes SIGINT on ignored, and Python then leaves it so."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Started:
    """`specchat ARGS` in the foreground as a host runs it, read line by line."""

    def __init__(self, tmp_path: Path, server_binary: Path, *args: str) -> None:
        env = specchat_env(tmp_path) | {"SPECCHAT_LLAMA_SERVER": str(server_binary),
                                        "TMPDIR": str(tmp_path)}
        self.proc = subprocess.Popen([sys.executable, "-m", "specchat", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env, cwd=tmp_path, preexec_fn=_as_in_a_terminal)
        self.lines: list[str] = []

    def line(self, pattern: str) -> re.Match:
        """Read stdout until a line matches `pattern`."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if found := re.search(pattern, line):
                return found
        raise AssertionError(f"no line matching {pattern!r}: {self.lines} "
                             f"{self.proc.stderr.read() if self.proc.stderr else ''}")

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def interrupt(self, sig: signal.Signals = signal.SIGINT) -> list[int]:
        """Ctrl-C (or `sig`); the pids of every process it had started that are still alive
        after (it has exited itself, or this fails)."""
        started = self.descendants()
        self.proc.send_signal(sig)
        self.proc.wait(60)
        gone, alive = psutil.wait_procs(started, timeout=15)
        return [p.pid for p in alive]


def in_terminal(args: list[str], env: dict[str, str], until: str, timeout: float = 90,
                size: tuple[int, int] = (45, 150)) -> tuple[bool, int]:
    """`specchat ARGS` in a terminal of its own (a pseudo-terminal of `size` rows and columns),
    as a user starts the full-screen app: whether `until` appeared on its screen within
    `timeout` seconds, and its exit status after Ctrl+Q."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "specchat", *args], stdin=slave, stdout=slave,
                            stderr=slave, env=env | {"TERM": "xterm-256color"},
                            start_new_session=True)
    os.close(slave)
    seen, shown, end = b"", False, time.monotonic() + timeout
    while not shown and time.monotonic() < end:
        if select.select([master], [], [], 0.5)[0]:
            try:
                seen += os.read(master, 1 << 16)
            except OSError:  # the app ended
                break
        shown = until in re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", seen.decode("utf-8", "replace"))
    # Ctrl+Q, again every 5 s while the app is busy (a loaded host); what it draws meanwhile is
    # read, or a full terminal buffer would stop the app mid-write before it sees the key
    quit_by, next_key = time.monotonic() + 60, 0.0
    while proc.poll() is None and time.monotonic() < quit_by:
        if time.monotonic() >= next_key:
            os.write(master, b"\x11")
            next_key = time.monotonic() + 5
        if select.select([master], [], [], 0.2)[0]:
            try:
                os.read(master, 1 << 16)
            except OSError:
                break
    if proc.poll() is None:
        proc.kill()
    code = proc.wait()
    os.close(master)
    return shown, code


def whole_reply(client, ids: list[int], sampling, n: int, seed: int
                ) -> tuple[list[int], str, int]:
    """One reply of the server, whole and unstreamed: every token id it generated (a streamed
    reply names a token it held back, half a character, by count only), its stop reason as
    the engine names it (end-of-turn's id left out, as the engine leaves it out) and the draft
    tokens it verified."""
    from specchat.server.verdicts import STOP_REASONS

    answer = client.get_json("/completion", {
        "prompt": ids, "n_predict": n, "temperature": sampling.temperature,
        "top_k": sampling.top_k, "top_p": sampling.top_p, "min_p": 0.0, "seed": seed,
        "return_tokens": True, "cache_prompt": True, "stream": False})
    tokens, stop = list(answer["tokens"]), STOP_REASONS[answer["stop_type"]]
    if stop == "eos":
        tokens = tokens[:-1]
    return tokens, stop, int(answer["timings"].get("draft_n", 0))
