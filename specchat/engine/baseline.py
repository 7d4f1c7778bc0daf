"""Measurement beside the engine: the reply's own clock, and the target-only rate its speedup
is read against, timed among the reply's rounds and after it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from specchat.engine.committed import GenerationSettings
from specchat.engine.events import StopReason

BASELINE_EVERY = 6
"""The baseline's target-only steps are timed among a reply's own rounds, at rounds 6, 12, 24,
48, ... (twice as far apart each time), so they run under the load the reply runs under (a UI
drawing it), not after it, when that load changes (the UI drawing the last rounds while the
engine idles); and so a long reply's steps spread over its depths, where a step costs more
than near the start (docs/lab/)."""

TimeSteps = Callable[[list[int], int], list[float]]
"""Seconds of each of n plain target steps from where `committed` reached, leaving no trace."""


class ReplyClock:
    """The engine's own time for a reply: a consumer that pauses at a yield (step-through mode,
    a slow terminal) and time spent aside (the baseline's steps) do not count."""

    def __init__(self) -> None:
        self.suspended = 0.0

    def __call__(self) -> float:
        return time.perf_counter() - self.suspended

    @contextmanager
    def aside(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.suspended += time.perf_counter() - start

    def hand_out(self, events: Iterable) -> Iterator:
        """Yield `events`, the consumer's time with each set aside."""
        for event in events:
            with self.aside():
                yield event


@dataclass
class TypedAhead:
    """The target's reads of a prompt while its message was typed, each (start, end, seconds):
    what the reply's first token did not wait for."""

    reads: list[tuple[int, int, float]] = field(default_factory=list)

    def add(self, end: int, tokens: int, seconds: float) -> None:
        """A read of `tokens` that left the cache `end` tokens long; reads the cache rolled
        back (an edit) are forgotten."""
        start = end - tokens
        self.reads = [r for r in self.reads if r[1] <= start] + [(start, end, seconds)]

    def kept(self, prompt_cached: int) -> tuple[int, float]:
        """Tokens and seconds of the reads the prompt kept (within its first `prompt_cached`
        tokens, which its turn found in the cache)."""
        kept = [r for r in self.reads if r[1] <= prompt_cached]
        return sum(end - start for start, end, _ in kept), sum(s for *_, s in kept)


class Baseline:
    """The target-only steps of one speculative reply, as (depth, seconds)."""

    def __init__(self, settings: GenerationSettings, time_steps: TimeSteps,
                 speculates: bool) -> None:
        self.settings, self.time_steps, self.speculates = settings, time_steps, speculates
        self.steps: list[tuple[int, float]] = []

    def between_rounds(self, round_no: int, committed: list[int], clock: ReplyClock
                       ) -> list[float]:
        """At rounds `BASELINE_EVERY` times 1, 2, 4, ... of a reply still going, one step, set
        aside; the latest `baseline_steps` are kept (a reply of R rounds takes about
        log2(R / 6) steps). Returns the seconds of the step it timed (none elsewhere): a plain
        step as the reply's load and depth make it now, which the policy learns too."""
        times, rest = divmod(round_no, BASELINE_EVERY)
        if not (times and not rest and times & (times - 1) == 0 and self.speculates
                and self.settings.baseline_steps > 0):
            return []
        with clock.aside():
            timed = self.time_steps(committed, 1)
        self.steps += [(len(committed), s) for s in timed]
        del self.steps[:-self.settings.baseline_steps]
        return timed

    def rate(self, own_rate: float | None, committed: list[int], stop_reason: StopReason
             ) -> tuple[float | None, str]:
        """The reply's target-only rate and what it was measured from: a target-only reply's
        own rate, else the steps timed in it and the rest of `baseline_steps` timed now, at
        the depth it reached."""
        if not self.speculates and own_rate:
            return own_rate, "this turn (target only)"
        if self.settings.baseline_steps > 0 and stop_reason != StopReason.CANCELLED:
            rest = self.time_steps(committed, self.settings.baseline_steps - len(self.steps))
            self.steps += [(len(committed), s) for s in rest]
            if self.steps:
                low, high = min(d for d, _ in self.steps), max(d for d, _ in self.steps)
                where = f"depth {high}" if low == high else f"depths {low}-{high}"
                return (1.0 / statistics.median(s for _, s in self.steps),
                        f"{len(self.steps)} target-only steps at {where}")
        return None, "not measured"
