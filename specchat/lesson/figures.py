"""The lesson's figures as numbers, apart from how a slide lays them out: what a recording
measured, with the uncertainty its own rounds give, and what the cost arithmetic predicts for it
from the costs the slides show. Each prediction sits beside its measurement as a Check, which
the slide prints, a rehearsal lists where they disagree, and the tests hold."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from specchat.costs import Costs, conditional_rates, speedup
from specchat.engine.events import Event, RoundEvent
from specchat.engine.policy.rates import expected_tokens, leviathan_tokens
from specchat.engine.stats import speedup_interval
from specchat.engine.verify_curve import VerifyCurve
from specchat.lesson.recordings import Curve, Recording

K_MAX = 8
"""The longest draft the gains table goes to."""
Z95 = 1.96
H200_VERIFY_MS = {1: 20.1, 2: 23.6, 4: 24.7, 8: 25.1, 12: 26.6, 16: 28.4}
"""The one GPU verify curve measured (docs/gpu.md, 2026-12-04): an H200, transformers,
bfloat16, a 7B-shaped target after a 512-token prompt, medians of 7."""
H200_SOURCE = ("an H200's verify curve measured 2026-12-04 (docs/gpu.md: transformers, "
               "bfloat16, a 7B-shaped target), this machine's draft cost in target steps")


@dataclass(frozen=True)
class Measured:
    """A measured figure and its 95% interval."""

    value: float
    low: float
    high: float

    def holds(self, predicted: float) -> bool:
        return self.low <= predicted <= self.high

    def settled(self, line: float = 1.0) -> bool:
        """Whether the interval says on which side of `line` the figure is."""
        return not self.low < line < self.high

    def shown(self, spec: str, unit: str = "") -> str:
        return (f"{self.value:{spec}}{unit} (95%: {self.low:{spec}}-{self.high:{spec}}"
                f"{unit})")


@dataclass(frozen=True)
class Check:
    """A figure a slide predicts beside the one it measured."""

    figure: str
    predicted: float
    measured: Measured
    left_out: str = ""
    """Where the prediction and the measurement part: the cost the prediction priced least
    well, from the run's own rounds (empty where that is not known)."""

    @property
    def agrees(self) -> bool:
        return self.measured.holds(self.predicted)

    def line(self) -> str:
        verdict = "within" if self.agrees else "OUTSIDE"
        why = f" ({self.left_out})" if self.left_out and not self.agrees else ""
        return (f"{self.figure}: predicted {self.predicted:.2f}, measured "
                f"{self.measured.shown('.2f')}: {verdict} the interval{why}")


def decode_rounds(events: list[Event]) -> list[RoundEvent]:
    """The rounds after the first (which reads the prompt and gives the first token)."""
    return [e for e in events if isinstance(e, RoundEvent)][1:]


def mean_interval(values: list[float]) -> Measured:
    """The mean with a normal 95% interval (none with one value)."""
    m = statistics.fmean(values)
    half = Z95 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return Measured(m, m - half, m + half)


@dataclass(frozen=True)
class Acceptance:
    """A reply's acceptance by draft position: the share that stood given that the ones before
    it stood, and over how many rounds each share is taken."""

    rates: tuple[tuple[float, int], ...]
    pooled: float
    """One rate for every position: the tokens that stood over the tokens tried (for a rate
    that is the same at every position, its best estimate)."""
    tokens_a_round: Measured
    """Tokens the drafting rounds gave, on average."""
    predicted: float
    """Tokens a round as the rates predict for the rounds as they ran (their draft lengths)."""
    rounds: int

    def rate(self, i: int) -> tuple[float, bool]:
        """Draft position i's (from 0) rate, and whether it is extrapolated (the pooled rate,
        past the positions the reply drafted)."""
        return (self.rates[i][0], False) if i < len(self.rates) else (self.pooled, True)

    def expected(self, k: int) -> float:
        """Tokens a round drafting k yields: 1 + a1 + a1 a2 + ..."""
        return expected_tokens([self.rate(i)[0] for i in range(k)])

    def closed_form(self, k: int) -> float:
        """(1 - a^(k+1)) / (1 - a) at the pooled rate a."""
        return leviathan_tokens(self.pooled, k)

    def check(self, label: str) -> Check:
        return Check(f"{label}: tokens a round", self.predicted, self.tokens_a_round)


def acceptance_of(events: list[Event]) -> Acceptance | None:
    """None where no round drafted."""
    drafting = [r for r in decode_rounds(events) if r.drafted]
    if not drafting:
        return None
    k = max(r.drafted for r in drafting)
    rates = conditional_rates([(r.drafted, r.accepted) for r in drafting], k)
    tried = sum(t for _, t in rates)
    pooled = sum(a * t for a, t in rates) / tried if tried else 0.0
    shares = [a for a, _ in rates]
    predicted = statistics.fmean(expected_tokens(shares[:r.drafted]) for r in drafting)
    return Acceptance(tuple(rates), pooled, mean_interval([float(r.emitted) for r in drafting]),
                      predicted, len(drafting))


def race_speedup(rec: Recording) -> Measured | None:
    """The speculative reply's decode rate over the target alone's, with a 95% interval from
    both replies' rounds (a bootstrap); None where either rate is missing."""
    plain, spec = rec.turns
    if not plain.counts.tokens_per_second or not spec.counts.tokens_per_second:
        return None
    value = spec.counts.tokens_per_second / plain.counts.tokens_per_second
    spans = [(b.emitted, b.t_s - a.t_s) for a, b in zip(
        [e for e in rec.speculative if isinstance(e, RoundEvent)],
        decode_rounds(rec.speculative)) if b.emitted]
    plain_rounds = [e for e in rec.target_only if isinstance(e, RoundEvent)]
    steps = [b.t_s - a.t_s for a, b in zip(plain_rounds, plain_rounds[1:]) if b.emitted]
    low, high = speedup_interval(spans, steps)
    if low is None or high is None:
        return Measured(value, value, value)
    return Measured(value, min(low, value), max(high, value))


def draft_ms_of(rec: Recording) -> float:
    """A draft token's cost in the recording's own rounds (0 for a drafter with no model)."""
    rounds = [r for r in decode_rounds(rec.speculative) if r.drafted]
    drafted = sum(r.drafted for r in rounds)
    return 1000 * sum(r.draft_s for r in rounds) / drafted if drafted else 0.0


def race_costs(curve: Curve, rec: Recording) -> Costs:
    """The race's own costs: its target pass, with the curve's shape for verifying more rows;
    what a drafted token cost in its rounds (with the draft reading the last round's token and
    sampling); and what its target alone paid a step beyond the pass (sampling, Python), which
    a round pays once too. So a prediction and the race's measured speedup divide by the same
    step, timed in the same minute. Where the target alone gave one token (no step to time),
    the curve's passes as timed."""
    plain = decode_rounds(rec.target_only)
    rate = rec.turns[0].counts.tokens_per_second
    if not plain or not rate:
        return Costs(curve.verify_ms, draft_ms_of(rec) or curve.draft_ms)
    step = 1000 * statistics.median(r.verify_s for r in plain)
    return Costs(tuple(ms * step / curve.verify_ms[0] for ms in curve.verify_ms),
                 draft_ms_of(rec), between=max(0.0, 1000 / rate - step))


def h200_costs(here: Costs) -> Costs:
    """The H200's verify curve with this machine's draft and between costs in its steps."""
    gpu = VerifyCurve(H200_VERIFY_MS)
    sizes = tuple(gpu.cost(n) or 0.0 for n in range(1, max(H200_VERIFY_MS) + 1))
    return Costs(sizes, here.draft_steps * sizes[0], between=here.between_steps * sizes[0])


def gains(costs: Costs, accept: Acceptance, k: int) -> float:
    return speedup(costs, [accept.rate(i)[0] for i in range(k)], k)


def predicted_race(curve: Curve, rec: Recording, accept: Acceptance) -> float:
    """The race's speedup as the costs predict it for its rounds as they ran (their draft
    lengths, a round that drafted nothing a plain step)."""
    costs = race_costs(curve, rec)
    rounds = decode_rounds(rec.speculative)
    tokens = sum(accept.expected(r.drafted) for r in rounds)
    steps = sum(costs.steps(r.drafted + 1) + r.drafted * costs.draft_steps + costs.between_steps
                for r in rounds)
    return tokens * (1 + costs.between_steps) / steps


def left_out(curve: Curve, rec: Recording) -> str:
    """The cost the race's prediction priced least well, a round on average: its verify passes
    against the curve, or its own plain steps against the target alone's (a machine whose
    speed moved between the two replies)."""
    costs = race_costs(curve, rec)
    rounds = decode_rounds(rec.speculative)
    if not rounds:
        return ""
    n = len(rounds)
    plain = [r.verify_s * 1000 for r in decode_rounds(rec.target_only)]
    parts = {
        "its verify passes against the curve":
            sum(r.verify_s * 1000 - costs.steps(r.drafted + 1) * costs.verify[0]
                for r in rounds) / n,
        "its plain steps against the target alone's (the machine's speed moved)":
            statistics.fmean(r.verify_s * 1000 for r in rounds if not r.drafted)
            - statistics.median(plain) if plain and any(not r.drafted for r in rounds)
            else 0.0,
    }
    name, ms = max(parts.items(), key=lambda item: abs(item[1]))
    return f"{name}: {ms:+.1f} ms a round" if abs(ms) >= 0.5 else ""
