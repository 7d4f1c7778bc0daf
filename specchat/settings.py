"""The one settings schema: models, draft and sampling, each a typed dataclass section.

Every field carries its help text, CLI flag and form label in its metadata, so the command-line
flags (`ask`, `chat`, the app, `bench`), the config file's `[engine]` section and the settings
screen are all made from these classes and cannot drift apart. A field with a `label` is saved
to the config file (where it becomes the CLI default) and shown in the settings form; an empty
form field means the field's default, so a seed or a GPU-layer count can be set back.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from typing import Any

from specchat.chat.context import POLICIES as CONTEXT_POLICIES
from specchat.choices import draft_text
from specchat.engine.loop import DraftSettings, GenerationSettings
from specchat.engine.policy import PolicyKind, TreeSettings
from specchat.engine.sampling import SamplingParams

BACKENDS = ("llamacpp", "transformers")
POLICIES = tuple(PolicyKind)


def bounded(kind: Callable[[str], Any], low: float | None, high: float | None
            ) -> Callable[[str], Any]:
    """`kind`, refusing a number outside [low, high] (and NaN or infinity) with ValueError."""
    if low is None and high is None:
        return kind

    def parse(text: str) -> Any:
        value = kind(text)
        if not math.isfinite(value) or (low is not None and value < low) or (
                high is not None and value > high):
            raise ValueError(text)
        return value
    parse.__name__ = getattr(kind, "__name__", "value")  # argparse names the type in errors
    return parse


def rpc_endpoints(text: str) -> str:
    """`HOST:PORT[,HOST:PORT...]` as given; ValueError when one part is not HOST:PORT."""
    for part in text.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(text)
    return ",".join(p.strip() for p in text.split(","))


def opt(default: Any, help: str, *, kind: Callable[[str], Any] | None = None,
        label: str | None = None, flag: str | None = None,
        choices: tuple[str, ...] | None = None, hint: str = "",
        low: float | None = None, high: float | None = None) -> Any:
    """A settings field. `kind` parses text (default: the default's type), within [low, high]
    where given; `label` puts it in the settings form and the config file; `hint` says what an
    empty form field means."""
    meta = {"help": help, "kind": bounded(kind or type(default), low, high), "label": label,
            "flag": flag, "choices": choices, "hint": hint}
    if isinstance(default, list):
        return field(default_factory=list, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class ModelOptions:
    """Which models, and where and how they run."""

    target: str = opt("default", "GGUF path, catalog name, or 'default'")
    draft: str = opt("default", "GGUF path, catalog name, 'default', 'ngram', 'ngram+MODEL' "
                                      "(n-gram matches first, the model otherwise) or 'none'",
                     kind=draft_text, label="drafter", hint="as --draft takes it; the draft menu (Ctrl+D) swaps live")
    server: str | None = opt(
        None, "URL of a running llama-server (llama.cpp's own, e.g. http://127.0.0.1:8080): chat "
              "with its models and watch its speculation instead of loading models here (bench: one "
              "more arm, on the server, beside the local ones)",
        kind=str, label="llama-server", hint="empty = models loaded here")
    baseline_server: str | None = opt(
        None, "URL of a second llama-server with the same target and no draft: each reply from "
              "--server has its speedup measured against it (a server cannot answer without its "
              "own speculation); bench runs it as the target-only arm", kind=str,
        label="baseline llama-server", hint="empty = no speedup for --server replies")
    n_ctx: int = opt(4096, "context size in tokens", flag="--ctx", low=32)
    threads: int | None = opt(None, "CPU threads (default: at each turn, one per core other "
                                    "programs leave free)", kind=int, low=1)
    draft_threads: int | None = opt(
        None, "CPU threads of the draft model (default: --threads, or as the target's follow "
              "the free cores: docs/lab/)", kind=int,
        label="draft threads", hint="empty = as the target", low=1)
    target_gpu_layers: int | None = opt(
        None, "layers of the target on the GPU (default: all, where a GPU backend exists)",
        kind=int, label="target GPU layers", hint="empty = all where a GPU exists", low=-1)
    draft_gpu_layers: int | None = opt(
        None, "layers of the draft on the GPU (default: all, where a GPU backend exists)",
        kind=int, label="draft GPU layers", hint="empty = all where a GPU exists", low=-1)
    rpc: str | None = opt(None, "HOST:PORT[,HOST:PORT...] of `specchat rpc-server`s: the target's "
                                "layers go there (--target-gpu-layers says how many)",
                          kind=rpc_endpoints, label="target RPC servers",
                          hint="HOST:PORT,...; empty = this machine")
    draft_rpc: str | None = opt(None, "the same for the draft model (default: it stays here)",
                                kind=rpc_endpoints, label="draft RPC servers",
                                hint="HOST:PORT,...; empty = this machine")
    rpc_timeout: float = opt(120.0, "seconds a target pass on RPC servers may take before "
                                    "specchat gives the server up as stopped answering", low=1.0)
    backend: str = opt("llamacpp", "llamacpp (GGUF) or transformers (torch: checkpoint folders "
                                   "or GGUF, needs the transformers extra)", choices=BACKENDS)
    device: str | None = opt(None, "transformers: cpu, cuda or mps (default: auto)", kind=str)
    dtype: str = opt("auto", "transformers: float32, bfloat16 or float16 (default: auto)")
    ngram_n: int = opt(3, "shortest match the n-gram drafter uses", low=1)
    ngram_n_max: int = opt(12, "longest match it looks for first", low=1)


def one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    """A parser that takes only one of `choices` (a form or config value is checked too)."""
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(text)
        return text
    return parse


def on_off(text: str) -> bool:
    """A switch in the form or the config file: on/off (yes/no, true/false, 1/0 too)."""
    word = text.strip().lower()
    if word in ("on", "yes", "true", "1"):
        return True
    if word in ("off", "no", "false", "0"):
        return False
    raise ValueError(text)


@dataclass
class DraftOptions:
    """How much to draft each round. The default (guarded, k=3, the default draft model) never
    costs the user: it drafts k tokens a round while this reply's rounds bring more tokens a
    second than plain target steps on this machine, and 1 token or none where they do not,
    saying why. `fixed` drafts every round (a workshop's demonstration of what a draft does
    where it loses); what pays best on a given machine is `specchat tune`'s to find."""

    policy: str = opt("guarded", "guarded: draft k tokens a round while that beats plain steps "
                                 "here, 1 or none where it does not; fixed: draft k tokens every "
                                 "round; adaptive: choose up to k each round from measured costs "
                                 "and acceptance", kind=one_of(POLICIES),
                      choices=POLICIES, label="draft policy",
                      hint="guarded, fixed or adaptive (chooses up to k a round)")
    k: int = opt(3, "tokens to draft per round (adaptive: the most per round)",
                 label="draft length k", hint="tokens drafted per round (adaptive: at most)",
                 low=1, high=64)
    n_min: int = opt(0, "drop drafts shorter than this", label="minimum draft", low=0)
    p_min: float = opt(0.0, "stop drafting when the draft's top probability is below this",
                       label="confidence stop", hint="stop drafting below this draft probability",
                       low=0.0, high=1.0)
    tree: bool = opt(False, "draft trees: beside a draft token the draft model was unsure of, "
                            "verify its next-best tokens in the same target pass (adaptive: "
                            "only where this machine's verify curve makes the rows pay)",
                     kind=on_off, label="draft trees", hint="on or off")
    tree_nodes: int = opt(4, "draft trees: alternatives verified a round, at most",
                          label="tree alternatives", hint="a round, at most", low=1, high=15)
    tree_p: float = opt(0.9, "draft trees: branch only beside draft tokens drawn with a top "
                             "probability below this", label="tree threshold",
                        hint="branch below this draft probability", low=0.0, high=1.0)

    def engine(self) -> DraftSettings:
        tree = TreeSettings(self.tree_nodes, self.tree_p) if self.tree else None
        return DraftSettings(self.k, self.n_min, self.p_min, PolicyKind(self.policy), tree)


@dataclass
class SamplingOptions:
    """How each reply is sampled, when it ends, and what its speedup is measured against."""

    temperature: float = opt(0.0, "0 = greedy", label="temperature", low=0.0, high=100.0)
    top_k: int = opt(0, "0 = off", label="top-k", low=0)
    top_p: float = opt(1.0, "1 = off", label="top-p", low=0.0, high=1.0)
    seed: int | None = opt(None, "random seed (default: random)", kind=int, label="seed",
                           hint="empty = random", low=0)
    max_tokens: int = opt(256, "tokens per reply", label="max tokens", hint="per reply", low=1)
    stop: list[str] = opt([], "stop string (repeatable)", kind=str)
    system: str | None = opt(None, "system message", kind=str)
    context_policy: str = opt(
        "rolling", "when the conversation does not fit the context: leave the oldest turns out "
                   "of the prompt (rolling), the ones after the first (truncate-middle), or stop",
        kind=one_of(CONTEXT_POLICIES), choices=CONTEXT_POLICIES, label="context policy",
        hint="rolling, truncate-middle or stop")
    baseline_steps: int = opt(4, "time this many target-only steps in each speculative reply, "
                                 "the latest of those at rounds 6, 12, 24, 48, ... (the rest "
                                 "where it ended), for its speedup (0: off)", low=0)

    def params(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p, self.seed)

    def generation(self) -> GenerationSettings:
        return GenerationSettings(max_tokens=self.max_tokens, stop=list(self.stop),
                                  baseline_steps=self.baseline_steps)


@dataclass
class Settings:
    models: ModelOptions = field(default_factory=ModelOptions)
    draft: DraftOptions = field(default_factory=DraftOptions)
    sampling: SamplingOptions = field(default_factory=SamplingOptions)

    def sections(self) -> Iterator[tuple[str, Any]]:
        yield from ((f.name, getattr(self, f.name)) for f in fields(self))

    def saved(self) -> dict[str, Any]:
        """The `[engine]` section of the config file: every form field that is not None."""
        return {f.name: getattr(section, f.name) for _, section in self.sections()
                for f in fields(section) if f.metadata["label"] and getattr(section, f.name) is not None}


SECTIONS = {"models": ModelOptions, "draft": DraftOptions, "sampling": SamplingOptions}


def _default(f: Field) -> Any:
    return [] if f.default is MISSING else f.default


def form_fields() -> list[tuple[str, Field]]:
    """(section, field) of every field in the settings form, in form order."""
    order = ("draft", "sampling", "models")
    return [(name, f) for name in order for f in fields(SECTIONS[name]) if f.metadata["label"]]


def parse_field(f: Field, text: str) -> Any:
    """A form or config value: empty means the default; raises ValueError naming the field."""
    text = text.strip()
    if not text:
        return _default(f)
    try:
        return f.metadata["kind"](text)
    except ValueError:
        help = f.metadata["hint"] or f.metadata["help"]
        raise ValueError(f"{f.metadata['label'] or f.name}: {text!r} is not valid ({help})") from None


def from_form(base: Settings, values: dict[str, str]) -> Settings:
    """`base` with every form field replaced by what the form holds (empty: the default)."""
    changed: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for name, f in form_fields():
        changed[name][f.name] = parse_field(f, values.get(f.name, ""))
    return Settings(**{name: replace(section, **changed[name]) for name, section in base.sections()})


def from_config(engine: dict[str, Any]) -> tuple[Settings, list[str]]:
    """Settings from the config file's `[engine]` section, and one line for each value that
    could not be used (the default stands in for it)."""
    problems: list[str] = []
    settings = Settings()
    for name, f in form_fields():
        if f.name not in engine:
            continue
        value = engine[f.name]
        try:
            typed = parse_field(f, str(value))
            if isinstance(value, bool) is not isinstance(_default(f), bool) or not isinstance(
                    value, (int, float, str)):
                raise ValueError(f"{f.name}: {value!r} is not valid")
        except ValueError as exc:
            problems.append(f"config [engine] {exc}; using the default")
            continue
        setattr(getattr(settings, name), f.name, typed)
    return settings, problems


def _flag(f: Field) -> str:
    return f.metadata["flag"] or "--" + f.name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser, defaults: Settings,
                  sections: Iterable[str] = tuple(SECTIONS), skip: Iterable[str] = ()) -> None:
    """One argument group per section, with `defaults` (the config file's) as the defaults."""
    for name, section in defaults.sections():
        if name not in sections:
            continue
        group = parser.add_argument_group(name)
        for f in fields(section):
            if f.name in skip:
                continue
            default = getattr(section, f.name)
            kw: dict[str, Any] = {"dest": f"{name}.{f.name}", "default": default,
                                  "help": f.metadata["help"]}
            if isinstance(default, list):
                kw.update(action="append", default=list(default))
            elif isinstance(default, bool):
                kw.update(action=argparse.BooleanOptionalAction)
            else:
                kw.update(type=f.metadata["kind"], choices=f.metadata["choices"])
                if default is not None:
                    kw["help"] += " (default: %(default)s)"
            group.add_argument(_flag(f), **kw)


def from_args(args: argparse.Namespace, skip: Iterable[str] = ()) -> Settings:
    """The settings the parsed flags of `add_arguments` hold (skipped fields keep defaults)."""
    values = vars(args)
    out = Settings()
    for name, section in out.sections():
        for f in fields(section):
            key = f"{name}.{f.name}"
            if f.name not in skip and key in values:
                setattr(section, f.name, values[key])
    return out
