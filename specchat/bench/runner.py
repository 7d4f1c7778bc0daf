"""Run a prompt suite through several drafter settings and keep what each generation measured.

Every number comes from the engine's event stream (the same events the TUI shows): one `Run`
per generation, built by `Run.from_events`. Arms run interleaved (each prompt through every arm,
then the next prompt, then the next repeat) so that a noisy machine slows all arms alike, and
every run starts from empty KV caches so time to first token includes the whole prompt.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specchat.choices import DraftChoice
from specchat.engine.backend import Backend, user_turn
from specchat.engine.drafters import NO_DRAFT, Drafter
from specchat.engine.events import Event, RoundEvent, TurnEvent
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.policy import PolicyKind
from specchat.engine.sampling import SamplingParams
from specchat.engine.stats import TurnStats
from specchat.errors import SpecchatError
from specchat.loading import speculative_engine, warm_up
from specchat.numbers import mean

BUILTIN_PROMPTS = Path(__file__).with_name("prompts.toml")
DEFAULT_MAX_TOKENS = 96
BASELINE_STEPS = 4
"""Target-only steps each speculative run times after itself (as the app does), for the
speedup it reports."""


@dataclass(frozen=True)
class Prompt:
    category: str
    name: str
    text: str
    max_tokens: int | None = None


def _prompt(p: dict[str, Any]) -> Prompt:
    prompt = Prompt(p["category"], p["name"], p["text"], p.get("max_tokens"))
    if not all(isinstance(v, str) and v for v in (prompt.category, prompt.name, prompt.text)):
        raise ValueError(f"category, name and text must be text: {p!r:.60}")
    if prompt.max_tokens is not None and (
            not isinstance(prompt.max_tokens, int) or isinstance(prompt.max_tokens, bool)
            or prompt.max_tokens < 1):
        raise ValueError(f"max_tokens must be a positive whole number: {p!r:.60}")
    return prompt


def load_prompts(path: Path | None = None, categories: Sequence[str] = ()) -> list[Prompt]:
    """The built-in suite, or the user's file of the same form; optionally some categories."""
    path = path or BUILTIN_PROMPTS
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        prompts = [_prompt(p) for p in data["prompt"]]
        if not prompts:
            raise ValueError("no [[prompt]] in it")
    except FileNotFoundError:
        raise SpecchatError(f"prompts file not found: {path}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        reason = " ".join(str(exc).split())
        raise SpecchatError(f"{path}: not a prompts file ([[prompt]] with category, name, "
                            f"text): {reason}") from None
    if categories:
        unknown = set(categories) - {p.category for p in prompts}
        if unknown:
            raise SpecchatError(f"no prompts in categories {sorted(unknown)} in {path.name}")
        prompts = [p for p in prompts if p.category in categories]
    return prompts


@dataclass(frozen=True)
class Arm:
    """One way of decoding: a drafter (as `--draft` takes it, parsed) and its draft settings."""

    drafter: DraftChoice
    settings: DraftSettings = field(default_factory=DraftSettings)

    def __post_init__(self) -> None:
        object.__setattr__(self, "drafter", DraftChoice.of(self.drafter))

    @property
    def label(self) -> str:
        if self.drafter.none:
            return "target only"
        kind, k = self.settings.policy_kind, self.settings.k
        how = {PolicyKind.ADAPTIVE: f"adaptive k<={k}", PolicyKind.GUARDED: f"guarded k={k}"}.get(
            kind, f"k={k}")
        return f"{self.short_drafter} {how}{' tree' if self.settings.tree else ''}"

    @property
    def short_drafter(self) -> str:
        """The drafter as a person names it: a GGUF path by its file stem."""
        return self.drafter.short

    @property
    def fixed_k(self) -> int | None:
        fixed = self.settings.policy_kind == PolicyKind.FIXED
        return self.settings.k if fixed and not self.drafter.none else None


@dataclass
class Run:
    """What one generation measured, taken from its events."""

    arm: str
    drafter: str
    k: int | None
    category: str
    prompt: str
    repeat: int
    tokens: int
    wall_s: float
    ttft_s: float
    decode_s: float
    tokens_per_second: float | None
    gaps: list[float]
    drafted: int
    accepted: int
    spec_rounds: int
    spec_emitted: int
    plain_rounds: int
    """Rounds after the first that drafted nothing (target steps)."""
    draft_s: float
    """Draft seconds of the rounds that drafted."""
    spec_verify_s: float
    plain_verify_s: float
    predicted_tokens_per_second: float | None
    declined_rounds: int
    catchup_s: float = 0.0
    """Decode seconds the draft model spent catching up (TurnEvent.catchup_s)."""
    reported_speedup: float | None = None
    """The speedup the turn itself reported (against target-only steps timed after it at its
    depth), to set beside the one a back-to-back target-only run of the prompt gives."""
    branch_nodes: int = 0
    """Draft tokens on a tree's branches verified beside the chains."""
    drafts: list[tuple[int, int]] = field(default_factory=list)
    """(drafted, accepted) of each round that drafted: acceptance by position (tune)."""

    @classmethod
    def from_events(cls, events: Iterable[Event], **labels: Any) -> Run:
        stats = TurnStats()
        draft_s = spec_verify_s = plain_verify_s = 0.0
        plain_rounds = branch_nodes = 0
        drafts: list[tuple[int, int]] = []
        turn = None
        for event in events:
            if isinstance(event, RoundEvent):
                stats.add_round(event)
                branch_nodes += event.branch_nodes
                if event.drafted:
                    drafts.append((event.drafted, event.accepted))
                    draft_s += event.draft_s
                    spec_verify_s += event.verify_s
                elif event.round > 0:
                    plain_verify_s += event.verify_s
                    plain_rounds += 1
            elif isinstance(event, TurnEvent):
                turn = event
        if turn is None:
            raise ValueError("the events hold no turn summary")
        return cls(**labels, tokens=turn.counts.n_tokens, wall_s=turn.counts.wall_s, ttft_s=turn.counts.ttft_s,
                   decode_s=turn.counts.decode_s, tokens_per_second=turn.counts.tokens_per_second,
                   gaps=stats.gaps, drafted=turn.counts.n_drafted, accepted=turn.counts.n_accepted,
                   spec_rounds=stats.spec_rounds, spec_emitted=stats.spec_emitted,
                   plain_rounds=plain_rounds, draft_s=draft_s, spec_verify_s=spec_verify_s,
                   plain_verify_s=plain_verify_s,
                   predicted_tokens_per_second=turn.counts.predicted_tokens_per_second,
                   declined_rounds=turn.counts.declined_rounds, catchup_s=turn.counts.catchup_s,
                   reported_speedup=turn.counts.speedup if turn.draft != NO_DRAFT else None,
                   branch_nodes=branch_nodes, drafts=drafts)

    @property
    def itl_mean(self) -> float | None:
        return mean(self.gaps)


Progress = Callable[[int, int, Run], None]
Remote = Callable[[list[int], GenerationSettings], Iterable[Event]]
"""An arm that generates elsewhere (a llama-server): the same prompt ids as the local arms and
the settings in, its events out."""
SERVER = "server"
"""The drafter label of a remote arm: its draft costs are the server's, not measured here."""


class BenchRunner:
    """One engine per arm over a shared target, warmed up once; `run` takes one prompt through
    every arm. The engines live as long as the runner, so an adaptive policy keeps what it
    learned of the machine's costs from prompt to prompt, as it would in a long session."""

    def __init__(self, target: Backend, drafters: Mapping[DraftChoice, Drafter] | Mapping[str, Drafter],
                 arms: Sequence[Arm], max_tokens: int | None = None,
                 remote: Mapping[str, Remote] | None = None,
                 prepare: Callable[[SpeculativeEngine], None] | None = None,
                 baseline_steps: int = BASELINE_STEPS, warm: bool = True) -> None:
        """`prepare` is given each engine before its warm-up (tune hands the policy the verify
        curve it timed); `baseline_steps` each turn times for its own speedup; `warm`: a short
        turn of each engine first (tune's models are paged in by its timings already)."""
        self.target, self.max_tokens, self.baseline_steps = target, max_tokens, baseline_steps
        self.remote = dict(remote or {})
        greedy = SamplingParams()
        loaded = {DraftChoice.of(choice): drafter for choice, drafter in drafters.items()}
        self.engines = [(arm, speculative_engine(target, loaded[arm.drafter], greedy,
                                                 arm.settings, np.random.default_rng(0)))
                        for arm in arms]
        for _, engine in self.engines:  # page both models in before anything is timed
            if prepare is not None:
                prepare(engine)
            fresh(engine)
            if warm:
                warm_up(engine, 4)

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        return user_turn(self.target, prompt.text)

    def run(self, prompt: Prompt, repeat: int = 0) -> Iterator[Run]:
        """Greedy decoding, so every arm writes the same reply (up to near-ties) and the rates
        compare like with like. `max_tokens` applies to every prompt; without it each prompt's
        own (or DEFAULT_MAX_TOKENS)."""
        ids = self.prompt_ids(prompt)
        settings = GenerationSettings(max_tokens=self.max_tokens or prompt.max_tokens
                                      or DEFAULT_MAX_TOKENS, baseline_steps=self.baseline_steps)
        labels = {"category": prompt.category, "prompt": prompt.name, "repeat": repeat}
        for arm, engine in self.engines:
            fresh(engine)
            yield Run.from_events(engine.generate(ids, settings), arm=arm.label,
                                  drafter=arm.short_drafter, k=arm.fixed_k, **labels)
        for label, remote in self.remote.items():
            yield Run.from_events(remote(ids, settings), arm=label, drafter=SERVER, k=None,
                                  **labels)


def run_suite(
    target: Backend,
    drafters: Mapping[DraftChoice, Drafter] | Mapping[str, Drafter],
    arms: Sequence[Arm],
    prompts: Sequence[Prompt],
    repeats: int = 1,
    max_tokens: int | None = None,
    progress: Progress | None = None,
    remote: Mapping[str, Remote] | None = None,
) -> list[Run]:
    """Each prompt through every arm (the local ones, then the `remote` ones), then the next
    prompt, `repeats` times; `drafters` maps each arm's drafter to a loaded drafter."""
    runner = BenchRunner(target, drafters, arms, max_tokens, remote)
    runs: list[Run] = []
    total = repeats * len(prompts) * (len(arms) + len(runner.remote))
    for repeat in range(repeats):
        for p in prompts:
            for run in runner.run(p, repeat):
                runs.append(run)
                if progress:
                    progress(len(runs), total, run)
    return runs


def fresh(engine: SpeculativeEngine) -> None:
    """Empty caches and a new conversation for the policy (see `CostModel.new_conversation`)."""
    engine.clear_caches()
    engine.policy.costs.new_conversation()
