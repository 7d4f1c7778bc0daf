"""The speculation loop: a reply's lifecycle, round after round (round.py plays each).

A round's events are handed out only after both KV caches are cut back to the committed tokens,
so a consumer that stops listening (or cancels) always leaves consistent caches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from specchat.engine import kvsync
from specchat.engine.backend import Backend
from specchat.engine.baseline import Baseline, ReplyClock, TypedAhead
from specchat.engine.committed import CommittedReply, GenerationSettings
from specchat.engine.drafters import Drafter
from specchat.engine.events import ContextEvent, Event, StopReason, TurnEvent
from specchat.engine.policy import (
    AdaptivePolicy,
    CostModel,
    FixedPolicy,
    GuardedPolicy,
    Policy,
    PolicyKind,
    TreeSettings,
)
from specchat.engine.round import RoundModels, play, settle
from specchat.engine.sampling import SamplingParams
from specchat.engine.stats import TurnStats
from specchat.engine.types import Draft, FittedPrompt, MachineWatch
from specchat.errors import ContextOverflowError

FitPrompt = Callable[[Sequence[int]], FittedPrompt | None]
"""Asked with the reply's ids so far when the reply reaches the end of the context: a shorter
prompt to go on from, or None to stop there (`context_full`)."""


@dataclass
class DraftSettings:
    k: int = 4
    """Tokens to draft per round (fixed policy), or the most per round (adaptive policy)."""
    n_min: int = 0
    """A draft shorter than this is dropped and the round is a plain target step."""
    p_min: float = 0.0
    """Fixed policy: stop drafting when the draft's top probability is below this."""
    policy_kind: PolicyKind = PolicyKind.FIXED
    """How each round's draft length is chosen (engine/policy/)."""
    tree: TreeSettings | None = None
    """Draft trees: alternatives beside unsure draft tokens, verified with the chain (None:
    chains)."""

    def policy(self, costs: CostModel | None = None) -> Policy:
        if self.policy_kind == PolicyKind.ADAPTIVE:
            return AdaptivePolicy(self.k, costs, self.tree)
        if self.policy_kind == PolicyKind.GUARDED:
            return GuardedPolicy(self.k, self.p_min, costs, self.tree)
        return FixedPolicy(self.k, self.p_min, costs, self.tree)


class SpeculativeEngine:
    """Runs turns over one target and a swappable drafter. Not thread-safe: one worker at a time."""

    def __init__(
        self,
        target: Backend,
        drafter: Drafter,
        sampling: SamplingParams = SamplingParams(),
        draft_settings: DraftSettings | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        """`rng` is shared with a sampling model drafter, so one seed fixes the whole run."""
        self.target = target
        self.drafter = drafter
        self.sampling = sampling
        self.policy: Policy = FixedPolicy(0)
        self.draft_settings = draft_settings or DraftSettings()
        self.rng = rng if rng is not None else np.random.default_rng(sampling.seed)
        self.typed_ahead = TypedAhead()
        """What the target read of the next prompt before its turn (`read_ahead`)."""
        self.last_ids: list[int] = []
        """The prompt and reply of the last turn, as committed."""
        self.watch: MachineWatch | None = None
        """The caller's watch on the machine: each turn's threads and the CPU others used
        (None: neither is measured; specchat.loading gives every engine it builds one)."""

    @property
    def draft_settings(self) -> DraftSettings:
        return self._draft_settings

    @draft_settings.setter
    def draft_settings(self, settings: DraftSettings) -> None:
        """New settings take a new policy that keeps what the old one measured of the costs."""
        self._draft_settings = settings
        self.policy = settings.policy(self.policy.costs)

    def configure(self, sampling: SamplingParams, draft_settings: DraftSettings) -> None:
        """Use these settings from the next turn on: one new generator for the engine and its
        drafter (one seed fixes the whole run), and a policy that keeps the measured costs."""
        self.sampling, self.draft_settings = sampling, draft_settings
        self.rng = np.random.default_rng(sampling.seed)
        self.drafter.configure(sampling, self.rng)

    def use_drafter(self, drafter: Drafter) -> None:
        """Swap the drafter (it catches up on the conversation at its first proposal) and free
        the old one's model."""
        old, self.drafter = self.drafter, drafter
        if old is not drafter:
            old.close()

    def close(self) -> None:
        """Free both models; the engine is not used again."""
        self.drafter.close()
        self.target.close()

    def clear_caches(self) -> None:
        """Empty both models' caches: the next turn evaluates its whole prompt (a fair time to
        first token when runs are compared)."""
        kvsync.release(self.target, [])
        self.drafter.release([])
        self.typed_ahead = TypedAhead()

    # -- one turn ---------------------------------------------------------------------------
    def generate(
        self,
        prompt_ids: Sequence[int],
        settings: GenerationSettings | None = None,
        cancel: threading.Event | None = None,
        fit_prompt: FitPrompt | None = None,
    ) -> Iterator[Event]:
        """Yield one reply's events: token verdicts and a summary per round, then the turn's.
        Checks `cancel` between rounds. At the end of the context `fit_prompt` may give a
        shorter prompt, evaluated with the reply so far (a ContextEvent), and the reply goes on."""
        settings = settings or GenerationSettings()
        if len(prompt_ids) >= self.target.n_ctx:
            raise ContextOverflowError(
                f"the prompt has {len(prompt_ids)} tokens; the context holds {self.target.n_ctx}"
            )
        turn = _Turn(self, prompt_ids, settings)
        self.policy.start_turn()
        committed, reply, clock, round_no = list(prompt_ids), turn.reply, turn.clock, 0
        while not reply.stop_reason:
            if cancel is not None and cancel.is_set():
                reply.stop_reason = StopReason.CANCELLED
                break
            free = self.target.n_ctx - len(committed)  # draft tokens that still fit
            if free < 0:  # the last committed token cannot be evaluated any more
                if (refilled := self._shift_context(reply, fit_prompt, clock)) is None:
                    reply.stop_reason = StopReason.CONTEXT_FULL
                    break
                committed, shift = refilled
                turn.stats.add_context(shift)
                yield from clock.hand_out([shift])
                continue
            cap = 0
            if round_no > 0:  # the first token of a turn is the target's alone
                cap = max(0, min(free, settings.max_tokens - len(reply.ids) - 1))
            events, summary = play(self._round_models(), round_no, committed, reply, cap, clock,
                                   turn.t_start)
            turn.stats.add_round(summary)
            round_no += 1
            yield from clock.hand_out([*events, summary])
            if not reply.stop_reason and not (cancel is not None and cancel.is_set()):
                for step_s in turn.baseline.between_rounds(round_no, committed, clock):
                    self.policy.costs.machine.learn_verify(1, step_s)
        yield turn.finish(committed)

    def _round_models(self) -> RoundModels:
        return RoundModels(self.target, self.drafter, self.sampling, self.rng, self.policy,
                           self.draft_settings.n_min)

    def _shift_context(self, reply: CommittedReply, fit_prompt: FitPrompt | None,
                       clock: Callable[[], float]) -> tuple[list[int], ContextEvent] | None:
        """Mid-reply at the end of the context: the shorter prompt the caller makes room with
        and the reply so far, evaluated again (timed); None where the caller makes none."""
        fitted = fit_prompt(reply.ids) if fit_prompt else None
        if fitted is None:
            return None
        committed = fitted.prompt_ids + reply.ids
        t0 = clock()
        n = self._refill(committed)
        return committed, ContextEvent(fitted.left_out, len(fitted.prompt_ids), True, n,
                                       clock() - t0)

    def _begin_watch(self) -> tuple[MachineWatch | None, int | None]:
        """The turn's watch on the machine, and the target's threads it fitted the models to
        (another process's CPU would count as another program's: watched only where both
        models run here)."""
        models = [m for m in (self.target, self.drafter.model) if m is not None]
        watch = self.watch if all(m.local for m in models) else None
        return watch, self._fit_threads(watch.begin()) if watch else None

    def _fit_threads(self, free: int | None) -> int | None:
        """Both models on at most `free` threads where the user left the count to specchat;
        the target's threads (None where the watch gave no count)."""
        if free is None:
            return None
        if self.drafter.model is not None:
            self.drafter.model.fit_threads(free)
        return self.target.fit_threads(free)

    def _refill(self, committed: list[int]) -> int:
        """Evaluate what the target's cache lacks of `committed` but its last token; return how
        many tokens that was. The drafter catches up at its next proposal."""
        n = kvsync.read(self.target, committed)
        self.drafter.release(committed)
        return n

    def read_ahead(self, ids: Sequence[int]) -> tuple[int, int]:
        """Off any reply's clock: both models read `ids` but the last token (a prompt before
        its message is sent, the cache rolled back to the common prefix where it was edited),
        so the reply that starts from ids, or from ids and more, has only the rest to read.
        The target's reads are timed for the next turn (`TurnCounts.typed_ahead_s`). Returns
        the tokens the target and the drafter read."""
        t0 = time.perf_counter()
        n = kvsync.read(self.target, ids)
        if n:
            self.typed_ahead.add(len(self.target.tokens), n, time.perf_counter() - t0)
        return n, self.drafter.read(ids)

    def catch_up(self) -> int:
        """Off any reply's clock: the drafter reads what it missed of the last reply (rounds
        the policy declined), so the next reply starts with both caches current. Returns the
        tokens it read."""
        return self.drafter.read(self.last_ids)

    def _plain_steps_s(self, committed: list[int], n: int) -> list[float]:
        """Seconds of each plain target step at the depth `committed` reached: n rounds of
        the same `_round` a target-only turn runs, continuing the text; then both caches are
        cut back to `committed`, and the random stream restored (a sampled step draws from it),
        as if the steps never ran. Fewer (none) where the context is full."""
        rng_state = self.rng.bit_generator.state
        seq = list(committed)
        scratch = CommittedReply(self.target, GenerationSettings(max_tokens=n + 1))
        times, models = [], self._round_models()
        try:
            for i in range(n):  # past an end of generation too: each is one target step all the same
                t0 = time.perf_counter()
                settle(models, i + 1, seq, Draft(), scratch)
                times.append(time.perf_counter() - t0)
        except ContextOverflowError:
            pass
        kvsync.release(self.target, committed)
        self.drafter.release(committed)
        self.rng.bit_generator.state = rng_state
        return times


class _Turn:
    """One reply's clock, committed text, stats and baseline, from its start to its TurnEvent."""

    def __init__(self, engine: SpeculativeEngine, prompt_ids: Sequence[int],
                 settings: GenerationSettings) -> None:
        self.engine, self.prompt_ids = engine, list(prompt_ids)
        cached = kvsync.common_prefix(engine.target.tokens, self.prompt_ids)
        self.typed_ahead = engine.typed_ahead.kept(cached)
        engine.typed_ahead = TypedAhead()
        self.watch, self.threads = engine._begin_watch()
        self.clock = ReplyClock()
        self.t_start = self.clock()
        self.reply = CommittedReply(engine.target, settings)
        self.stats = TurnStats()
        self.baseline = Baseline(settings, engine._plain_steps_s, engine.drafter.speculates)
        self.passes_at_start = (engine.target.passes, engine.drafter.passes)

    def finish(self, committed: list[int]) -> TurnEvent:
        """Cut both caches back to the reply and sum the turn up."""
        engine, reply, baseline = self.engine, self.reply, self.baseline
        reply.finish()
        engine.last_ids = list(committed)
        kvsync.release(engine.target, committed)
        engine.drafter.release(committed)
        wall_s = self.clock() - self.t_start
        rate, source = baseline.rate(self.stats.tokens_per_second, committed, reply.stop_reason)
        return self.stats.turn_event(
            text=reply.text, token_ids=reply.ids, prompt_ids=self.prompt_ids, wall_s=wall_s,
            target_passes=engine.target.passes - self.passes_at_start[0] - len(baseline.steps),
            draft_passes=engine.drafter.passes - self.passes_at_start[1],
            draft=engine.drafter.name, k=engine.draft_settings.k, policy=engine.policy.name,
            stop_reason=reply.stop_reason, baseline=rate, baseline_source=source,
            others_cpu=self.watch.end() if self.watch else None,
            baseline_steps_s=[s for _, s in baseline.steps] if rate else [],
            threads=self.threads, typed_ahead=self.typed_ahead)
