"""From what the user typed (--target, --draft, settings) to a ready engine.

One place resolves names, checks draft compatibility before any weights load, and builds the
drafter, so `ask`, `chat`, the TUI and the benchmark all get the same checks and messages.
"""

from __future__ import annotations

import gc
import importlib.util
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specchat.catalog import compat
from specchat.catalog.catalog import Catalog, models_dir, resolve_model
from specchat.catalog.layout import known_curve, known_shape
from specchat.chat.state import Session
from specchat.choices import DraftChoice
from specchat.cpu import CpuWatch
from specchat.engine.backend import Backend, user_turn
from specchat.engine.combined_drafter import CombinedDrafter
from specchat.engine.drafters import Drafter, NoDrafter
from specchat.engine.loop import DraftSettings, GenerationSettings, SpeculativeEngine
from specchat.engine.model_drafter import ModelDrafter
from specchat.engine.ngram_drafter import NgramDrafter
from specchat.engine.sampling import SamplingParams
from specchat.engine.text_drafter import TextDrafter, round_trips
from specchat.errors import CacheTruncationError, IncompatibleDraftError, SpecchatError
from specchat.native.llama_tools import installed_build
from specchat.settings import BACKENDS, ModelOptions, Settings

NEEDS_LLAMA_CPP = ("models loaded here need llama-cpp-python, which this install leaves out: run "
                   "./install.sh (it builds it for this machine), or chat with a running "
                   "llama-server (--server URL)")


def require_llama_cpp() -> None:
    """Refuse in one line, before any model is looked for, where llama.cpp is not installed
    (the client install)."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise SpecchatError(NEEDS_LLAMA_CPP)


def load_model(path: Path, options: ModelOptions, n_ctx: int, gpu_layers: int | None,
               rpc: str | None = None, threads: int | None = None) -> Backend:
    """One model on the backend the options name (its layers on the RPC servers `rpc` names),
    on `threads` CPU threads (default: the options' threads)."""
    threads = threads or options.threads
    if options.backend == "transformers":
        if rpc:
            raise SpecchatError("--rpc needs the llamacpp backend")
        from specchat.backends.hf import TransformersBackend

        return TransformersBackend(path, models_dir(), n_ctx=n_ctx, device=options.device,
                                   dtype=options.dtype, n_threads=threads)
    if options.backend != "llamacpp":
        raise SpecchatError(f"backend {options.backend!r}: choose one of {', '.join(BACKENDS)}")
    if rpc:  # in a child process: a server lost mid-turn costs the turn, not specchat
        from specchat.backends.isolated import IsolatedBackend

        return IsolatedBackend(path, rpc=rpc, timeout_s=options.rpc_timeout, n_ctx=n_ctx,
                               n_gpu_layers=gpu_layers, n_threads=threads)
    from specchat.backends.llamacpp import LlamaCppBackend  # the transformers path needs no build

    return LlamaCppBackend(path, n_ctx=n_ctx, n_gpu_layers=gpu_layers, n_threads=threads)


def load_target(choice: str, options: ModelOptions, catalog: Catalog | None = None) -> Backend:
    if options.backend == "llamacpp":
        require_llama_cpp()
    path = resolve_model(choice, "target", catalog)
    return load_model(path, options, options.n_ctx, options.target_gpu_layers, options.rpc)


def load_drafter(
    choice: DraftChoice | str,
    target: Backend,
    sampling: SamplingParams,
    rng: np.random.Generator,
    options: ModelOptions,
    catalog: Catalog | None = None,
) -> Drafter:
    """`none`, `ngram`, a model (path, catalog name, `default`) checked against the target, or
    `ngram+MODEL`: n-gram matches first, the model otherwise."""
    try:
        choice = DraftChoice.of(choice)
    except ValueError as exc:
        raise SpecchatError(str(exc)) from None
    if choice.none:
        return NoDrafter()
    if not target.can_truncate:
        raise CacheTruncationError(target.name)
    if choice.model is None:
        return NgramDrafter(options.ngram_n, options.ngram_n_max)
    model = _load_draft_model(choice.model, target, sampling, rng, options, catalog)
    if choice.ngram:
        return CombinedDrafter(NgramDrafter(options.ngram_n, options.ngram_n_max), model)
    return model


def _load_draft_model(name: str, target: Backend, sampling: SamplingParams,
                      rng: np.random.Generator, options: ModelOptions, catalog: Catalog | None
                      ) -> ModelDrafter | TextDrafter:
    """A draft model (path, catalog name, `default`) checked against the target."""
    path = resolve_model(name, "draft", catalog)
    _own_servers(options)
    headers = path.suffix == ".gguf" and target.path.suffix == ".gguf"
    verdict = compat.check(target.path, path) if headers else None
    if verdict is not None and not verdict.as_text:  # judged before any weights load
        _compatible(verdict, path, target)
    backend = load_model(path, options, target.n_ctx, options.draft_gpu_layers, options.draft_rpc,
                         options.draft_threads)
    if verdict is None:
        verdict = compat.check_loaded(target, backend)
        if not verdict.ok and not verdict.as_text:
            backend.close()
            _compatible(verdict, path, target)
    if not backend.can_truncate:
        backend.close()
        raise CacheTruncationError(backend.name)
    if verdict.ok:
        return _model_drafter(backend, sampling, rng)
    return _as_text(backend, target, sampling, rng)


def _model_drafter(backend: Backend, sampling: SamplingParams,
                   rng: np.random.Generator) -> ModelDrafter:
    """A draft by tokens, whose passes read guessed tokens too where `specchat models
    optimize` timed its curve on this build and a wider pass costs little (guessed_rows.py)."""
    return ModelDrafter(backend, sampling, rng,
                        known_shape(models_dir(), backend.path, installed_build()))


def _as_text(backend: Backend, target: Backend, sampling: SamplingParams,
             rng: np.random.Generator) -> TextDrafter:
    """A draft with another vocabulary drafting as text, where both tokenizers give text back
    unchanged; else one line saying which does not (the draft's model is freed)."""
    broken = [m.name for m in (target, backend) if not round_trips(m)]
    if broken:
        backend.close()
        raise IncompatibleDraftError(
            f"{backend.name} cannot draft for {target.name}: another vocabulary, and "
            f"{broken[0]}'s tokenizer does not give text back unchanged")
    return TextDrafter(backend, target, sampling, rng)


def _own_servers(options: ModelOptions) -> None:
    """Refuse a draft on a server the target uses: a ggml RPC server serves one client at a
    time, and each model on servers has its own client (its own process)."""
    if not (options.rpc and options.draft_rpc):
        return
    from specchat.backends.rpc import parse

    shared = [e for e in parse(options.draft_rpc) if e in parse(options.rpc)]
    if shared:
        raise SpecchatError(
            f"--draft-rpc {shared[0]} is also the target's server: an RPC server serves one "
            "client at a time, and the draft has its own. Start a second server for the draft "
            "(`specchat rpc-server --port 50053` on the same machine serves the same device)")


def one_draft_model_on_servers(options: ModelOptions, drafters: Sequence[DraftChoice]) -> None:
    """Refuse to hold several draft models at once on --draft-rpc (bench and tune load their
    drafters together): a server serves one client, and each model is one."""
    models = [str(d) for d in drafters if d.model is not None]
    if options.draft_rpc and len(models) > 1:
        raise SpecchatError(f"--draft-rpc holds one draft model at a time (an RPC server serves "
                            f"one client), and {len(models)} are asked for ({', '.join(models)}):"
                            " run them one at a time")


def _compatible(verdict: compat.Compatibility, path: Path, target: Backend) -> None:
    if not verdict.ok:
        raise IncompatibleDraftError(
            f"{path.name} cannot draft for {target.path.name}: {verdict.reason}")


def fit_drafter(target: Backend, drafter: Drafter) -> tuple[Drafter, str]:
    """The drafter if it can draft for `target` (a draft model with another vocabulary drafting
    as text), else no drafter (the old drafter's model freed); and what the status line adds."""
    model = drafter.model
    reason = ""
    if drafter.speculates and not target.can_truncate:
        reason = CacheTruncationError.REASON
    elif model is not None:
        verdict = compat.check(target.path, model.path) if (
            model.path.suffix == ".gguf" and target.path.suffix == ".gguf") else \
            compat.check_loaded(target, model)
        reason = "" if verdict.ok or verdict.as_text else verdict.reason
        if not reason:
            return _refit(drafter, target, verdict.ok)
    if not reason:
        return drafter, ""
    drafter.close()
    return NoDrafter(), f"; draft set to none: {reason}"


def _refit(drafter: Drafter, target: Backend, same_vocabulary: bool) -> tuple[Drafter, str]:
    """A model drafter for a new target: by tokens where the vocabularies match, else as text
    (the n-gram half of a combined drafter kept)."""
    inner = drafter.drafter if isinstance(drafter, CombinedDrafter) else drafter
    if not isinstance(inner, ModelDrafter | TextDrafter):
        return drafter, ""
    if same_vocabulary:
        fitted: ModelDrafter | TextDrafter = (inner if isinstance(inner, ModelDrafter) else
                                              _model_drafter(inner.backend, inner.sampling,
                                                             inner.rng))
    else:
        try:
            fitted = _as_text(inner.backend, target, inner.sampling, inner.rng)
        except IncompatibleDraftError as exc:
            return NoDrafter(), f"; draft set to none: {exc}"
    note = "" if same_vocabulary else "; another vocabulary: the draft drafts as text"
    if isinstance(drafter, CombinedDrafter):
        return CombinedDrafter(drafter.ngram, fitted), note
    return fitted, note


def build_engine(settings: Settings) -> SpeculativeEngine:
    """The target, the drafter (checked against it before its weights load) and the engine."""
    catalog = Catalog.load()
    models, sampling = settings.models, settings.sampling.params()
    target = load_target(models.target, models, catalog)
    rng = np.random.default_rng(sampling.seed)
    try:
        drafter = load_drafter(models.draft, target, sampling, rng, models, catalog)
    except SpecchatError:
        target.close()
        raise
    return speculative_engine(target, drafter, sampling, settings.draft.engine(), rng)


WARMUP_TOKENS = 8


def warm_up(engine: SpeculativeEngine, tokens: int = WARMUP_TOKENS) -> None:
    """A short turn of both models, its caches emptied after: right after loading, the weights
    are still being paged in, and the first reply's rates would be several times too low."""
    list(engine.generate(user_turn(engine.target, "Say hello."),
                         GenerationSettings(max_tokens=tokens)))
    engine.clear_caches()


def speculative_engine(target: Backend, drafter: Drafter, sampling: SamplingParams,
                       draft_settings: DraftSettings | None = None,
                       rng: np.random.Generator | None = None) -> SpeculativeEngine:
    """An engine that watches this machine's CPU around each turn (specchat/cpu.py: the
    threads the free cores allow, the share other programs used), and whose policy starts
    from the verify curve timed for this target file, where `specchat models optimize` timed
    one (catalog/layout.py: `known_curve`)."""
    engine = SpeculativeEngine(target, drafter, sampling, draft_settings, rng)
    machine = engine.policy.costs.machine
    machine.shape, machine.shape_step_s = known_curve(models_dir(), target.path, installed_build())
    engine.watch = CpuWatch()
    return engine


def open_session(settings: Settings, engine: SpeculativeEngine | None = None
                 ) -> tuple[Session, str]:
    """The conversation's session as the settings say: on the llama-server they name
    (--server), else here on `engine` (built from the settings where none is given); and where
    its replies come from, in one line. The CLI and the app open every session here."""
    from specchat.chat.session import ChatSession, Conversation
    from specchat.wording import placement

    conversation = Conversation(system=settings.sampling.system)
    policy = settings.sampling.context_policy
    if settings.models.server:
        from specchat.server.session import ServerSession

        server = ServerSession.connect(settings.models.server, settings.models.baseline_server,
                                       settings.sampling.params(), conversation, policy)
        trees = " · draft trees: a llama-server drafts chains" if settings.draft.tree else ""
        return server, server.where + trees
    local = ChatSession(engine or build_engine(settings), conversation, policy)
    out_of_the_collectors_way()
    return local, placement(local.engine)


def out_of_the_collectors_way() -> None:
    """Leave what the process holds once its models are loaded out of Python's full
    collections: one walked every object (about 93,000 in the app, from the imports on) and
    held the GIL for 67-102 ms, on the app's UI thread too, while the model thread waited for
    it between passes (docs/lab/2026-12-07-the-app-in-one-process-and-a-catch-up-probe.md)."""
    gc.collect()
    gc.freeze()
