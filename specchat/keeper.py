"""The models behind the app, with no UI in it: load and swap them, configure sampling, time
this machine's costs, record race lanes.

Every method that touches a model runs on a worker thread and returns what it made; the app
keeps the result (or drops it) on its own thread, so no app state changes off the UI thread.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from specchat import timing
from specchat.chat.session import ChatSession, Conversation
from specchat.choices import DraftChoice
from specchat.costs import Costs
from specchat.engine.backend import Backend, user_turn
from specchat.engine.drafters import Drafter, NoDrafter
from specchat.engine.loop import DraftSettings, SpeculativeEngine
from specchat.loading import (
    build_engine,
    fit_drafter,
    load_drafter,
    load_target,
    speculative_engine,
    warm_up,
)
from specchat.settings import Settings
from specchat.trace import Lane


def _let_go(model: Backend | None) -> None:
    """Free the RPC servers a model is on, so a model replacing it can load there (a server
    serves one client at a time); the model loads there again if it is used again."""
    if model is not None and getattr(model, "rpc", None):
        from specchat.backends.isolated import IsolatedBackend

        if isinstance(model, IsolatedBackend):
            model.let_go()


class ModelKeeper:
    """Builds and changes engines from the settings; owns no app state."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def load(self) -> SpeculativeEngine:
        """Target and drafter from the settings (the drafter checked before it loads)."""
        return build_engine(self.settings)

    @staticmethod
    def warm_up(engine: SpeculativeEngine) -> None:
        """Page both models in (loading.warm_up). Each reply's speedup is measured against
        target-only steps timed after it, at its own depth: GenerationSettings.baseline_steps."""
        warm_up(engine)

    @staticmethod
    def measure_costs(engine: SpeculativeEngine, repeats: int = timing.COST_REPEATS) -> Costs:
        """Time the target verifying 1..16 tokens (`repeats` times each, the sizes interleaved)
        and one draft pass at the conversation's depth (a short prompt first if nothing was said
        yet); the caches are left as they were."""
        target = engine.target
        if not target.tokens:
            ids = user_turn(target, "Say hello.")
            target.eval(ids, len(ids) - 1)
        times = timing.verify_times(target, repeats)
        model = engine.drafter.model
        draft = timing.draft_pass_after(model, target.tokens, repeats * 2) if model else 0.0
        return Costs(tuple(statistics.median(t) for t in times), draft, len(target.tokens),
                     tuple(timing.spread(t) for t in times))

    def load_drafter(self, engine: SpeculativeEngine, choice: DraftChoice | str) -> Drafter:
        """A drafter for the engine's target, sharing its generator (one seed, one run). An
        old draft model on RPC servers lets go of them first, as the target does below."""
        _let_go(engine.drafter.model)
        return load_drafter(choice, engine.target, engine.sampling, engine.rng, self.settings.models)

    def load_target(self, engine: SpeculativeEngine, choice: str) -> tuple[SpeculativeEngine, str]:
        """An engine on a new target that keeps the drafter where it can draft for it (else
        none, and the reason). The old target is freed; the policy keeps its measured costs.
        An old target on RPC servers lets go of them first (a server serves one client at a
        time); if the new one fails to load, the old one loads there again at its next turn."""
        _let_go(engine.target)
        target = load_target(choice, self.settings.models)
        drafter, note = fit_drafter(target, engine.drafter)
        engine.target.close()
        fresh = speculative_engine(target, drafter, engine.sampling, engine.draft_settings,
                                   engine.rng)
        return fresh, note

    def configure(self, engine: SpeculativeEngine) -> None:
        """Apply the sampling and draft settings to the engine from its next turn on."""
        engine.configure(self.settings.sampling.params(), self.settings.draft.engine())

    def race(self, engine: SpeculativeEngine, text: str, cancel: threading.Event,
             on_lane: Callable[[int, str], None] | None = None, drafter: Drafter | None = None,
             max_tokens: int | None = None, draft_settings: DraftSettings | None = None
             ) -> list[Lane]:
        """Target-only, then the engine's own drafter (or `drafter`), with the engine's draft
        settings (or `draft_settings`), each alone from empty caches on the same prompt: the
        lanes a race plays side by side. `max_tokens`: a shorter race than the settings' (the
        lesson's)."""
        target = engine.target
        sampling = self.settings.sampling
        ids = ChatSession(engine, Conversation(system=sampling.system)).prompt(
            text, sampling.max_tokens).prompt_ids
        plain = speculative_engine(target, NoDrafter(), engine.sampling,
                                   rng=np.random.default_rng(engine.sampling.seed))
        # the lanes are compared with each other on one clock: no baseline steps after them
        generation = replace(sampling.generation(), baseline_steps=0,
                             max_tokens=max_tokens or sampling.max_tokens)
        drafting = engine if drafter is None and draft_settings is None else speculative_engine(
            target, drafter or engine.drafter, engine.sampling,
            draft_settings or engine.draft_settings, engine.rng)
        lanes = []
        for i, (label, racer) in enumerate((
                ("target only", plain),
                (f"speculative: {drafting.drafter.name}, {drafting.policy.name}", drafting))):
            if on_lane is not None:
                on_lane(i, label)
            engine.clear_caches()  # both lanes evaluate the whole prompt
            lanes.append(Lane(label, list(racer.generate(ids, generation, cancel))))
        return lanes
