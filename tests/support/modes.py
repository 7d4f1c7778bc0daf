"""Every way a reply can be made, listed from the code, and the one check each gets.

The modes are the product of where the target runs (the schema's backends and the places
ModelOptions can put it instead), the drafters the engine has (its drafter classes; the
combined drafter once for each kind of model it takes), the schema's policies, trees off and
on, and greedy or sampling with each of the schema's sampling settings turned on. A mode that
can produce a reply is checked through the whole engine: greedy, the same reply as target-only
(support.checks' one greedy oracle); sampling, the first two tokens' distribution against the
target's own (chi-square at `SAMPLES`, with its power stated and a must-fail control of the
size of bias it is meant to catch). tests/engine/test_modes.py holds the list to the code.
"""

from __future__ import annotations

import itertools
import pkgutil
import time
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

import numpy as np
from scipy.stats import chi2, ncx2

import specchat.engine as engine_package
from specchat import settings as schema
from specchat.engine import combined_drafter, model_drafter, ngram_drafter, text_drafter
from specchat.engine import drafters as drafters_module
from specchat.engine.backend import Backend
from specchat.engine.combined_drafter import CombinedDrafter
from specchat.engine.drafters import Drafter, NoDrafter
from specchat.engine.loop import DraftSettings, SpeculativeEngine
from specchat.engine.model_drafter import ModelDrafter
from specchat.engine.ngram_drafter import NgramDrafter
from specchat.engine.policy import PolicyKind, TreeSettings
from specchat.engine.sampling import SamplingParams
from specchat.engine.text_drafter import TextDrafter

DRAFTER_NAMES: dict[type, str] = {NoDrafter: "none", ModelDrafter: "model", NgramDrafter: "ngram",
                                  TextDrafter: "as text"}
"""The table's name of each drafter class; a class the engine gains fails the listing until it
is named here (and so checked)."""

PLACES = {"rpc": "rpc", "server": "llama-server"}
"""ModelOptions fields that run the target elsewhere than the backend, by the table's name."""

SAMPLERS = {"temperature": SamplingParams(temperature=1.0),
            "top_k": SamplingParams(temperature=1.0, top_k=8),
            "top_p": SamplingParams(temperature=1.0, top_p=0.8)}
"""Each sampling setting of the schema turned on (beside temperature 1 where it is not the
temperature itself); a setting the schema gains fails the listing until it is here."""

K = 3
"""Draft length (adaptive: at most): the second token can come from a draft position below the
root, a tree's children included."""
TREE = TreeSettings(nodes=4, p_max=0.95, width=3)
"""Branch beside draft tokens under 0.95: on the tiny pair, most of them."""

SAMPLES = 4000
"""Replies each sampling check draws."""
ALPHA = 1e-4
"""A sampling check fails below this p-value (one false alarm in 10,000 checks)."""
MAX_CELLS = 32
"""The most likely (first, second) token pairs tested, the rest pooled into one cell."""
BIAS_W2 = (0.25 - 0.19) ** 2 / 0.25 + (0.50 - 0.56) ** 2 / 0.50
"""The bias each sampling check must catch, as Cohen's w squared: the adaptive tree's old
bias at the rule alone ([.10, .15, .19, .56] where the target says [.10, .15, .25, .50]),
0.0216."""


DRAFTER_MODULES = (drafters_module, model_drafter, ngram_drafter, combined_drafter, text_drafter)
"""The engine's drafter modules, in the table's order (every engine module named for a drafter:
`engine_drafters` checks)."""


def engine_drafters() -> list[type]:
    """Every drafter class of the engine's drafter modules (what proposes and releases; the
    Drafter protocol itself aside)."""
    named = {m.name for m in pkgutil.iter_modules(engine_package.__path__) if "drafter" in m.name}
    assert named == {m.__name__.rsplit(".", 1)[1] for m in DRAFTER_MODULES}, named
    return [c for m in DRAFTER_MODULES for c in vars(m).values()
            if isinstance(c, type) and c.__module__ == m.__name__
            and not getattr(c, "_is_protocol", False)
            and callable(getattr(c, "propose", None)) and callable(getattr(c, "release", None))]


def drafter_kinds() -> list[str]:
    """The drafters a reply can be made with: each class, and the combined drafter with each
    kind of model its signature takes."""
    kinds = []
    for cls in engine_drafters():
        if cls is CombinedDrafter:
            inner = typing.get_type_hints(CombinedDrafter.__init__)["drafter"]
            kinds += [f"ngram+{DRAFTER_NAMES[c]}" for c in typing.get_args(inner)]
        else:
            kinds.append(DRAFTER_NAMES[cls])
    return kinds


def decodings() -> dict[str, SamplingParams]:
    """Greedy, and each sampling setting that the schema shares with the engine's
    SamplingParams (the seed aside) turned on."""
    engine_fields = {f.name for f in fields(SamplingParams)} - {"seed"}
    shared = [f.name for f in fields(schema.SamplingOptions) if f.name in engine_fields]
    return {"greedy": SamplingParams()} | {name: SAMPLERS[name] for name in shared}


def targets() -> list[str]:
    return [*schema.BACKENDS, *(PLACES[f.name] for f in fields(schema.ModelOptions)
                                if f.name in PLACES)]


@dataclass(frozen=True)
class Mode:
    target: str
    drafter: str
    policy: str
    tree: bool
    decoding: str

    @property
    def id(self) -> str:
        return "-".join((self.drafter.replace(" ", "_"), self.policy,
                         "tree" if self.tree else "chain", self.decoding))

    @property
    def sampling(self) -> SamplingParams:
        return decodings()[self.decoding]

    @property
    def settings(self) -> DraftSettings:
        return DraftSettings(k=K, policy_kind=PolicyKind(self.policy),
                             tree=TREE if self.tree else None)


SERVER_MODES = {"drafter": ("none", "model"), "policy": ("server",), "tree": (False,)}
"""A llama-server drafts with its own loop (draft-simple with `-md`, none without): specchat's
drafters, policies and trees do not reach it."""


def modes(target: str) -> list[Mode]:
    """Every mode of one target, in the table's order."""
    on_server = target == PLACES["server"]
    drafter = SERVER_MODES["drafter"] if on_server else drafter_kinds()
    policy = SERVER_MODES["policy"] if on_server else schema.POLICIES
    tree = SERVER_MODES["tree"] if on_server else (False, True)
    return [Mode(target, *combo)
            for combo in itertools.product(drafter, policy, tree, decodings())]


def all_modes() -> list[Mode]:
    return [m for t in targets() for m in modes(t)]


def make_drafter(kind: str, draft: Backend, other_vocab: Backend | None, target: Backend,
                 sampling: SamplingParams, rng: np.random.Generator) -> Drafter:
    """The drafter of `kind` over the tiny draft (`as text`: the draft of another vocabulary)."""
    def model(name: str) -> ModelDrafter | TextDrafter:
        if name == "as text":
            assert other_vocab is not None
            return TextDrafter(other_vocab, target, sampling, rng)
        return ModelDrafter(draft, sampling, rng)

    if kind == "none":
        return NoDrafter()
    if kind == "ngram":
        return NgramDrafter(1, 6)
    if kind.startswith("ngram+"):
        return CombinedDrafter(NgramDrafter(1, 6), model(kind.removeprefix("ngram+")))
    return model(kind)


def mode_of(engine: SpeculativeEngine) -> tuple[str, str, bool, SamplingParams]:
    """What an engine runs, read back from it: the check ran the mode it names."""
    d = engine.drafter
    kind = (f"ngram+{DRAFTER_NAMES[type(d.drafter)]}" if isinstance(d, CombinedDrafter)
            else DRAFTER_NAMES[type(d)])
    policy = str(engine.policy.kind)
    return kind, policy, engine.policy.tree is not None, engine.sampling


# -- the adaptive policy on a machine of known costs --------------------------------------------
class FakeClock:
    """`time.perf_counter` for the engine, moved only by the models' passes: the adaptive
    policy then meets the same machine on any host, loaded or not (a GPU-like verify curve, a
    draft pass a fifth of a target step), so it drafts and branches where a check needs it."""

    STEP_S = 0.01
    VERIFY_SLOPE = 0.05
    DRAFT_PASS_S = 0.002

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def verify(self, n: int) -> None:
        self.now += self.STEP_S * (1 + self.VERIFY_SLOPE * (n - 1))

    def draft(self, n: int) -> None:
        self.now += self.DRAFT_PASS_S


class Costed:
    """A real backend whose passes move a FakeClock by `charge(n tokens)`."""

    def __init__(self, inner: Backend, charge: Callable[[int], None]) -> None:
        self._inner, self._charge = inner, charge

    def eval(self, tokens: Sequence[int], logits_from: int) -> np.ndarray:
        self._charge(len(tokens))
        return self._inner.eval(tokens, logits_from)

    def eval_tree(self, tokens: Sequence[int], nodes: Sequence[int],
                  parents: Sequence[int]) -> np.ndarray:
        self._charge(len(tokens) + len(nodes))
        return self._inner.eval_tree(tokens, nodes, parents)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def on_fake_clock(monkeypatch, target: Backend, draft: Backend,
                  other_vocab: Backend | None) -> tuple[Backend, Backend, Backend | None]:
    """The models behind a FakeClock that stands in for `time.perf_counter`."""
    clock = FakeClock()
    monkeypatch.setattr(time, "perf_counter", clock)
    return (Costed(target, clock.verify), Costed(draft, clock.draft),
            None if other_vocab is None else Costed(other_vocab, clock.draft))


def knows_the_draft(engine: SpeculativeEngine) -> None:
    """The adaptive policy as in a session that has timed its draft model on the FakeClock's
    machine: a pass and a catch-up token known (else it prices the first catch-up of the prompt
    at its priors, which the tiny pair's short replies never pay back, and never drafts)."""
    drafter = engine.drafter
    model = drafter.drafter if isinstance(drafter, CombinedDrafter) else drafter
    if isinstance(model, ModelDrafter | TextDrafter):
        machine = engine.policy.costs.machine
        machine.learn_pass(model.name, FakeClock.DRAFT_PASS_S)
        machine.learn_catchup(model.name, FakeClock.DRAFT_PASS_S / 20)


# -- the sampling check's statistics --------------------------------------------------------------
def cells(expected: dict[tuple[int, int], float], n: int) -> list[tuple[int, int]]:
    """The pairs tested one by one: the most likely, each expected at least 5 times in n, at
    most MAX_CELLS - 1 (the rest is one pooled cell)."""
    likely = sorted(expected, key=expected.__getitem__, reverse=True)[: MAX_CELLS - 1]
    return [c for c in likely if expected[c] * n >= 5]


def cell_counts(samples: Sequence[tuple[int, int]], tested: list[tuple[int, int]]) -> np.ndarray:
    index = {c: i for i, c in enumerate(tested)}
    counts = np.zeros(len(tested) + 1)
    for pair in samples:
        counts[index.get(pair, len(tested))] += 1
    return counts


def cell_probs(expected: dict[tuple[int, int], float], tested: list[tuple[int, int]]) -> np.ndarray:
    probs = np.array([expected[c] for c in tested])
    return np.append(probs, max(0.0, 1.0 - probs.sum()))


def power(n_cells: int, n: int, w2: float = BIAS_W2) -> float:
    """The chance that a chi-square test over `n_cells` cells at ALPHA flags a departure of
    Cohen's w squared `w2` with n samples (the noncentral chi-square)."""
    df = n_cells - 1
    return float(1.0 - ncx2.cdf(chi2.ppf(1.0 - ALPHA, df), df, n * w2))


def biased(probs: np.ndarray, w2: float = BIAS_W2) -> np.ndarray:
    """`probs` with mass moved from its most likely cell to its second, by as much as makes a
    departure of Cohen's w squared `w2` (the control every check must fail)."""
    a, b = np.argsort(probs)[::-1][:2]
    d = np.sqrt(w2 / (1.0 / probs[a] + 1.0 / probs[b]))
    out = probs.copy()
    out[a] -= d
    out[b] += d
    assert out.min() >= 0.0, "too little mass in the top cell for the control's bias"
    return out


# -- the bias at its own size ---------------------------------------------------------------------
BIASED_P = (0.10, 0.15, 0.25, 0.50)
BIASED_Q = (0.55, 0.25, 0.15, 0.05)
"""The target's and the draft's distributions of the adaptive tree's old bias (issue 66): the
draft likes best what the target likes least."""


class Shaped:
    """A real backend whose every logits row is `logits` (its passes, cache and tokenizer are
    its own): a pair of models with known distributions, for a control whose bias is known."""

    def __init__(self, inner: Backend, probs: Sequence[float], tokens: Sequence[int]) -> None:
        self._inner = inner
        self.logits = np.full(inner.n_vocab, -1e4, dtype=np.float32)
        self.logits[list(tokens)] = np.log(np.asarray(probs, dtype=np.float64))

    def eval(self, tokens: Sequence[int], logits_from: int) -> np.ndarray:
        rows = self._inner.eval(tokens, logits_from)
        return np.broadcast_to(self.logits, rows.shape).copy()

    def eval_tree(self, tokens: Sequence[int], nodes: Sequence[int],
                  parents: Sequence[int]) -> np.ndarray:
        rows = self._inner.eval_tree(tokens, nodes, parents)
        return np.broadcast_to(self.logits, rows.shape).copy()

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


# -- the table ------------------------------------------------------------------------------------
CHECKS = {"llamacpp": "tests/engine/test_modes.py", "transformers": "tests/backends/test_hf_backend.py",
          "rpc": "tests/backends/test_rpc.py", "llama-server": "tests/server/test_server.py"}
"""Where each target's modes are checked, each by a `test_mode[<mode id>]`."""


def check_of(mode: Mode) -> str:
    return f"{CHECKS[mode.target]}::test_mode[{mode.id}]"


def modes_table(figures: dict[Mode, str]) -> list[str]:
    """docs/guide/numbers.md's table: every mode of `all_modes`, its check and what the check
    found in this run ("not run in this run" for a mode whose test did not run)."""
    lines = ["| target | drafter | policy | tree | decoding | check | figure |",
             "|---|---|---|---|---|---|---|"]
    for m in all_modes():
        figure = figures.get(m, "not run in this run")
        lines.append(f"| {m.target} | {m.drafter} | {m.policy} | {'tree' if m.tree else 'chain'} "
                     f"| {m.decoding} | `{check_of(m)}` | {figure} |")
    return lines


DISTRIBUTION_EVERYWHERE = ("model", "adaptive", True, "temperature")
"""The mode whose distribution check runs on every target (the one issue 66 found biased); a
target's other sampling modes compare rows (support.checks.check_mode_rows)."""


def checked_by_distribution(mode: Mode) -> bool:
    return mode.target == "llamacpp" or (
        mode.drafter, mode.policy, mode.tree, mode.decoding) == DISTRIBUTION_EVERYWHERE
