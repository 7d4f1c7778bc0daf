"""Turn statistics computed from round summaries: one piece for the engine and its consumers.

The engine feeds each `RoundEvent` it emits into a `TurnStats` and builds the `TurnEvent` from
it; the TUI and the benchmark feed the same events into their own `TurnStats` to show live
numbers. Every number is a count or a `time.perf_counter()` difference; nothing is estimated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specchat.engine.events import (
    ContextEvent,
    RoundEvent,
    StopReason,
    TurnCounts,
    TurnDiagnostics,
    TurnEvent,
    decode_rate,
    position_rates,
    share,
)
from specchat.numbers import mean, percentile


@dataclass
class TurnStats:
    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    k: int = 0
    rounds: int = 0
    spec_rounds: int = 0
    spec_emitted: int = 0
    branch_nodes: int = 0
    """Draft tokens on a tree's branches verified beside the chains."""
    t_first: float | None = None
    """Seconds from the turn's start to its first token."""
    t_last: float = 0.0
    spans: list[tuple[int, float]] = field(default_factory=list)
    """(tokens, seconds) of each round after the first token: the decode rate's parts."""
    gaps: list[float] = field(default_factory=list)
    """Inter-token latency as a consumer sees tokens arrive: the tokens of one round arrive
    together, so speculation makes it bursty (a long gap, then zeros)."""
    round_rates: list[float] = field(default_factory=list)
    """Tokens per second of each round (emitted / round time), for a sparkline."""
    drafted_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    expected_tokens: float = 0.0
    expected_s: float = 0.0
    declined: int = 0
    shifts: int = 0
    shift_tokens: int = 0
    shift_s: float = 0.0
    """Seconds the target spent evaluating a shortened prompt again mid-reply: in the turn's
    wall time, not in its decode rate (like the prompt's evaluation before the first token)."""
    catchup_tokens: int = 0
    catchup_s: float = 0.0
    turns: list[tuple[int, bool, str]] = field(default_factory=list)
    """Where drafting stopped or went on again in the reply: (tokens written by then, whether
    it stopped, why it stopped or went on)."""

    def add_context(self, event: ContextEvent) -> None:
        """Count a shift mid-reply (turns left out before the reply cost no decode time)."""
        if event.during_reply:
            self.shifts += 1
            self.shift_tokens += event.reeval_tokens
            self.shift_s += event.reeval_s

    def add_round(self, r: RoundEvent) -> None:
        self.rounds += 1
        self.drafted += r.drafted
        self.accepted += r.accepted
        self.k = r.k
        self.declined += r.declined
        drafting = not self.turns or not self.turns[-1][1]
        if r.declined and drafting:
            self.turns.append((self.tokens, True, r.why or "drafting would not pay"))
        elif r.drafted and not drafting:
            self.turns.append((self.tokens, False, r.resumed))
        self.catchup_tokens += r.catchup_tokens
        self.catchup_s += r.catchup_s
        if r.expected_tokens is not None and r.expected_s is not None:
            self.expected_tokens += r.expected_tokens
            self.expected_s += r.expected_s
        self.branch_nodes += r.branch_nodes
        if r.drafted:
            self.spec_rounds += 1
            self.spec_emitted += r.emitted
        for i in range(r.drafted):
            if i == len(self.drafted_at):
                self.drafted_at.append(0)
                self.accepted_at.append(0)
            self.drafted_at[i] += 1
            self.accepted_at[i] += i < r.accepted
        if r.emitted:
            if self.t_first is None:
                self.t_first = r.t_s
            else:
                self.gaps += [r.t_s - self.t_last] + [0.0] * (r.emitted - 1)
                self.spans.append((r.emitted, r.t_s - self.t_last))
            took = r.draft_s + r.verify_s
            self.round_rates.append(r.emitted / took if took > 0 else 0.0)
            self.t_last = r.t_s
        self.tokens += r.emitted

    @property
    def acceptance(self) -> float | None:
        return share(self.accepted, self.drafted)

    @property
    def mean_accepted_length(self) -> float | None:
        return share(self.spec_emitted, self.spec_rounds)

    @property
    def verified_per_round(self) -> float | None:
        """Draft tokens the target verified a drafting round: the chain's and its branches'."""
        return share(self.drafted + self.branch_nodes, self.spec_rounds)

    @property
    def decode_s(self) -> float:
        if self.t_first is None:
            return 0.0
        return self.t_last - self.t_first - self.shift_s

    @property
    def tokens_per_second(self) -> float | None:
        return decode_rate(self.tokens - 1, self.decode_s)

    @property
    def predicted_tokens_per_second(self) -> float | None:
        return share(self.expected_tokens, self.expected_s)

    @property
    def drafting_note(self) -> str:
        """When drafting stopped and went on again in the reply, why it went on (where the
        policy said), and why it last stopped."""
        if not self.turns:
            return ""
        moves = ", ".join(f"stopped at token {at}" if stopped else
                          f"resumed at token {at}" + (f" ({why})" if why else "")
                          for at, stopped, why in self.turns[-3:])
        why = next(why for _, stopped, why in reversed(self.turns) if stopped)
        return f"{moves}: {why}"

    @property
    def itl_mean(self) -> float | None:
        return mean(self.gaps)

    @property
    def itl_p95(self) -> float | None:
        return percentile(self.gaps, 0.95)

    @property
    def by_position(self) -> list[float]:
        return position_rates(self.accepted_at, self.drafted_at)

    def counts(self) -> dict[str, Any]:
        """What TurnCounts's rates are derived from (a version-1 trace's turn gets them
        again from its rounds)."""
        return {"decode_tokens": max(0, self.tokens - 1),
                "drafted_at": list(self.drafted_at), "accepted_at": list(self.accepted_at),
                "spec_rounds": self.spec_rounds, "spec_emitted": self.spec_emitted,
                "expected_tokens": self.expected_tokens, "expected_s": self.expected_s}

    def turn_event(
        self, *, text: str, token_ids: list[int], prompt_ids: list[int], wall_s: float,
        target_passes: int, draft_passes: int, draft: str, k: int, policy: str,
        stop_reason: StopReason,
        baseline: float | None = None, baseline_source: str = "not measured",
        others_cpu: float | None = None, baseline_steps_s: Sequence[float] = (),
        threads: int | None = None, typed_ahead: tuple[int, float] = (0, 0.0),
    ) -> TurnEvent:
        """The turn summary; `baseline` is the target-only decode rate the speedup is taken
        against, and `baseline_source` says how it was measured."""
        low, high = speedup_interval(self.spans, baseline_steps_s) if baseline_steps_s else (None, None)
        counts = TurnCounts(
            n_tokens=len(token_ids),
            n_drafted=self.drafted,
            n_accepted=self.accepted,
            ttft_s=self.t_first if self.t_first is not None else wall_s,
            decode_s=self.decode_s,
            wall_s=wall_s,
            target_passes=target_passes,
            draft_passes=draft_passes,
            rounds=self.rounds,
            **self.counts(),
            context_shifts=self.shifts,
            shift_tokens=self.shift_tokens,
            shift_s=self.shift_s,
            declined_rounds=self.declined,
            baseline_tokens_per_second=baseline,
            baseline_source=baseline_source,
            speedup_low=low,
            speedup_high=high,
            catchup_tokens=self.catchup_tokens,
            catchup_s=self.catchup_s,
            typed_ahead_tokens=typed_ahead[0],
            typed_ahead_s=typed_ahead[1],
        )
        return TurnEvent(
            text=text, token_ids=list(token_ids), prompt_token_ids=prompt_ids, draft=draft, k=k,
            stop_reason=stop_reason, policy=policy, counts=counts,
            diagnostics=TurnDiagnostics(drafting_note=self.drafting_note, others_cpu=others_cpu,
                                        threads=threads),
        )


RESAMPLES = 2000


def speedup_interval(spans: Sequence[tuple[int, float]], steps: Sequence[float],
                     coverage: float = 0.95) -> tuple[float | None, float | None]:
    """The `coverage` interval of a turn's speedup, from the spread of what it was measured
    from: the rounds' (tokens, seconds) and the baseline's step seconds, each resampled with
    replacement (a percentile bootstrap; a fixed seed, so the same turn gives the same
    interval). None where either has fewer than two parts: nothing to spread."""
    if len(spans) < 2 or len(steps) < 2:
        return None, None
    rng = np.random.default_rng(0)
    tokens = np.array([t for t, _ in spans], dtype=float)
    seconds = np.array([s for _, s in spans])
    picks = rng.integers(0, len(spans), (RESAMPLES, len(spans)))
    rates = tokens[picks].sum(axis=1) / seconds[picks].sum(axis=1)
    step_picks = np.asarray(steps)[rng.integers(0, len(steps), (RESAMPLES, len(steps)))]
    speedups = rates * np.median(step_picks, axis=1)
    tail = (1 - coverage) / 2 * 100
    low, high = np.percentile(speedups, [tail, 100 - tail])
    return float(low), float(high)


def paired_speedup_interval(arm: Sequence[tuple[int, float]], base: Sequence[tuple[int, float]],
                            coverage: float = 0.95) -> tuple[float | None, float | None]:
    """The `coverage` interval of a suite's speedup (the arm's total rate over the target-only
    arm's) from the spread over its prompts: `arm[i]` and `base[i]` are the (tokens, seconds) of
    the same prompt, resampled together (a paired percentile bootstrap, fixed seed). None with
    fewer than two pairs."""
    if len(arm) < 2 or len(arm) != len(base):
        return None, None
    rng = np.random.default_rng(0)
    a, b = np.asarray(arm, dtype=float), np.asarray(base, dtype=float)
    picks = rng.integers(0, len(a), (RESAMPLES, len(a)))
    a_rate = a[picks, 0].sum(axis=1) / a[picks, 1].sum(axis=1)
    b_rate = b[picks, 0].sum(axis=1) / b[picks, 1].sum(axis=1)
    tail = (1 - coverage) / 2 * 100
    low, high = np.percentile(a_rate / b_rate, [tail, 100 - tail])
    return float(low), float(high)
