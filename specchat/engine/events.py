"""The typed events the engine emits: the only contract between the engine and its consumers.

The TUI, `specchat ask --json`, the benchmark and the trace recorder all read this one stream.
Every event turns into a flat JSON object with `to_json()`, so a trace file is this stream as
JSON lines and can be replayed with no model.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any


class TokenKind(StrEnum):
    ACCEPTED = "accepted"
    """A draft token the target agreed with."""
    REJECTED = "rejected"
    """A draft token the target refused; never part of the reply."""
    CORRECTED = "corrected"
    """The target's own token at the first mismatch of a round."""
    BONUS = "bonus"
    """The extra target token after a fully accepted draft."""
    TARGET = "target"
    """A plain target token: target-only mode, or the first token of a turn."""


class StopReason(StrEnum):
    """Why a reply ended ("" while it goes on)."""

    NONE = ""
    EOS = "eos"
    STOP_STRING = "stop_string"
    MAX_TOKENS = "max_tokens"
    CANCELLED = "cancelled"
    CONTEXT_FULL = "context_full"


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenEvent:
    kind: TokenKind
    id: int
    text: str
    """The text this token adds to the reply (may be "" while a multi-byte character is
    incomplete); for a rejected token, its own piece decoded on its own."""
    position: int
    """Index of the token in the reply (a rejected token has the position it was proposed at)."""
    round: int
    p: float | None
    """The target's probability of this token after the sampling transforms (temperature 1 in
    greedy mode), where the target evaluated this position."""
    q: float | None
    """The drafter's probability of this token (1.0 for the n-gram drafter), for draft tokens."""
    logit_gap: float | None
    """The target's top-1 minus top-2 logit at this position, as this run computed it."""
    u: float | None = None
    """Sampling only: the uniform draw this draft token was tested with (it stands iff
    u < p/q); None in greedy mode and for draft tokens after the first refusal."""
    branch: bool = False
    """A draft tree's token off the chain (an alternative the draft drew beside it): one that
    stood replaced the chain's token at its position; one refused is a branch that lost."""
    type: str = field(default="token", init=False)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class RoundEvent:
    round: int
    k: int
    """The draft length the policy allowed this round (0: no draft)."""
    drafted: int
    """Draft tokens on the chain (a draft tree's branches: `branch_nodes`)."""
    accepted: int
    """Draft tokens that stood: the chain's, and where a tree's branch stood, its tokens."""
    draft_s: float
    verify_s: float
    emitted: int
    """Tokens this round added to the reply."""
    t_s: float
    """Seconds from the start of the turn to the end of this round (when its tokens appear)."""
    source: str = ""
    """The draft source (drafter, or n-gram match length) that proposed this round's draft."""
    declined: bool = False
    """The adaptive policy drafted nothing because no draft length was expected to pay."""
    why: str = ""
    """Why it declined, from what it measured here (declined rounds only)."""
    resumed: str = ""
    """Why it drafted again after rounds that drafted nothing (a probe, the text grew
    predictable, a code block opened); empty otherwise."""
    expected_tokens: float | None = None
    """The cost model's expected tokens for this round, before it was verified (None in the
    first round of a turn, which evaluates the prompt)."""
    expected_s: float | None = None
    """The cost model's expected seconds for this round."""
    draft_pieces: list[str] = field(default_factory=list)
    """The draft model's own tokens, as text, where it drafts in another vocabulary (the draft
    tokens above are the target's); empty otherwise."""
    target_conf: float | None = None
    """The target's running confidence when the round began (an EMA of its top probability
    at the reply's last positions): how predictable the text is here, which the adaptive
    policy reads before a draft model catches up (None before the reply's first token)."""
    catchup_tokens: int = 0
    """Committed tokens a draft model read before this round's first draft token beyond the
    round's own one or two (the last correction or bonus, and the draft token before it): the
    prompt at a reply's start, or the tokens of rounds it sat out. In its own tokens."""
    catchup_s: float = 0.0
    """Seconds of the pass that read them (it also gave the first draft token's row); 0 where
    the draft was in step."""
    branch_nodes: int = 0
    """Draft tokens on branches (a draft tree) the target verified beside the `drafted` chain
    in the same pass."""
    branches_tested: int = 0
    """Alternatives tested where the chain was refused (the draft had branched there), up to
    the one that stood."""
    branch_stood: bool = False
    """One of them stood: the round committed it instead of the target's correction."""
    type: str = field(default="round", init=False)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class TurnCounts:
    """What a reply counted and timed. Rates are not stored: each is derived from the counts
    where it is read (the properties below), so a trace shows what today's formula makes of
    what was counted."""

    n_tokens: int
    n_drafted: int
    n_accepted: int
    ttft_s: float
    """Time to the first token: prompt evaluation plus the first sampling."""
    decode_s: float
    """Seconds after the first token (mid-reply re-evaluations not counted)."""
    wall_s: float
    target_passes: int
    draft_passes: int
    rounds: int
    decode_tokens: int = 0
    """Tokens after the first: what the decode rate counts over `decode_s`."""
    drafted_at: list[int] = field(default_factory=list)
    """Rounds that drafted a token at draft position i."""
    accepted_at: list[int] = field(default_factory=list)
    """Of those, the rounds whose token at position i stood."""
    spec_rounds: int = 0
    """Rounds that drafted (a verify pass of a draft)."""
    spec_emitted: int = 0
    """Tokens those rounds added to the reply (the accepted and the target's own)."""
    expected_tokens: float = 0.0
    expected_s: float = 0.0
    """The cost model's expected tokens and seconds, summed over the rounds after the first
    (each predicted before its round ran)."""
    declined_rounds: int = 0
    """Rounds the adaptive policy left to the target alone because drafting would not pay."""
    baseline_tokens_per_second: float | None = None
    """The target-only decode rate at this turn's depth, on this machine, in this run (timed
    steps: a measurement, not a formula over this turn's counts)."""
    context_shifts: int = 0
    """Times the reply reached the end of the context and went on with turns left out."""
    shift_tokens: int = 0
    """Tokens the target evaluated again after those shifts."""
    shift_s: float = 0.0
    """Seconds those re-evaluations took (in wall_s, not in decode_s)."""
    baseline_source: str = "not measured"
    """How the baseline was measured: `N target-only steps at depth D` or `at depths A-D`
    (timed among the turn's rounds, one every BASELINE_EVERY, and the rest where it ended,
    continuing its text, then dropped), `this turn (target only)`, or `not measured` (a
    stopped turn, or baseline steps off)."""
    speedup_low: float | None = None
    """The 95% interval of `speedup` (with `speedup_high`): from the spread of what it was
    measured from, the turn's rounds and the baseline steps (a bootstrap of both)."""
    speedup_high: float | None = None
    catchup_tokens: int = 0
    """Tokens the draft model read to catch up (RoundEvent.catchup_tokens, summed)."""
    catchup_s: float = 0.0
    """Seconds of decode_s those catch-up passes took: what a draft that sat out rounds (or
    the prompt) cost before it drafted again."""
    typed_ahead_tokens: int = 0
    """Prompt tokens the target read while the message was typed, before Enter."""
    typed_ahead_s: float = 0.0
    """Seconds those reads took: what the first token did not wait for."""

    @property
    def acceptance_rate(self) -> float | None:
        """n_accepted / n_drafted; None when nothing was drafted."""
        return share(self.n_accepted, self.n_drafted)

    @property
    def mean_accepted_length(self) -> float | None:
        """Mean tokens a drafting round added (accepted drafts + the correction or bonus)."""
        return share(self.spec_emitted, self.spec_rounds)

    @property
    def accepted_by_position(self) -> list[float]:
        """Acceptance rate of the i-th draft position over the rounds that drafted that far."""
        return position_rates(self.accepted_at, self.drafted_at)

    @property
    def tokens_per_second(self) -> float | None:
        """Decode rate: tokens after the first, over the time after the first token (like
        llama-bench's tg); None for fewer than two tokens."""
        return decode_rate(self.decode_tokens, self.decode_s)

    @property
    def predicted_tokens_per_second(self) -> float | None:
        """The cost model's rate for the rounds after the first, beside `tokens_per_second`."""
        return share(self.expected_tokens, self.expected_s)

    @property
    def ttft_unread_s(self) -> float | None:
        """The first token's wait had the target read the whole message after Enter, as the
        target alone does: at most `ttft_s` plus the reads done while it was typed (reads in
        small pieces cost more a token than one); None where nothing was read ahead."""
        return self.ttft_s + self.typed_ahead_s if self.typed_ahead_tokens else None

    @property
    def speedup(self) -> float | None:
        """tokens_per_second over baseline_tokens_per_second."""
        rate, base = self.tokens_per_second, self.baseline_tokens_per_second
        return rate / base if rate and base else None


@dataclass(frozen=True, slots=True)
class TurnDiagnostics:
    """What explains a reply's numbers without being one of them."""

    drafting_note: str = ""
    """When the policy stopped drafting in the reply and went on again, and why it last
    stopped, from what it measured (empty: it never stopped)."""
    others_cpu: float | None = None
    """The share of this machine's CPU time other programs used during the turn (its baseline
    steps included): above 0.2 its timings are unreliable. None where not measured (not Linux,
    or a model runs in another process)."""
    threads: int | None = None
    """The CPU threads the target ran the turn with: one per core other programs left free when
    it started, unless --threads fixed them. None where not measured."""
    server: dict[str, Any] | None = None
    """A llama-server's own final `timings` for this reply (its prompt and decode rates, its
    draft counters), where a server generated it; the counts are the client's."""


@dataclass(frozen=True, slots=True)
class TurnEvent:
    """A reply's summary, in three kinds: the reply and the settings that made it, what it
    counted and timed (`counts`, with the rates derived from them), and `diagnostics`."""

    text: str
    token_ids: list[int]
    prompt_token_ids: list[int]
    draft: str
    k: int
    stop_reason: StopReason
    """eos, stop_string, max_tokens, context_full (the context is full and the context policy
    leaves nothing more out), or cancelled."""
    counts: TurnCounts
    policy: str = ""
    """The draft-length policy: `fixed k=3` or `adaptive k<=8`."""
    diagnostics: TurnDiagnostics = field(default_factory=TurnDiagnostics)
    type: str = field(default="turn", init=False)

    def to_json(self) -> dict[str, Any]:
        """One flat object (the JSON-lines form `ask --json`, `serve` and traces write): the
        reply, the counts, the rates derived from them for whoever reads the line (a trace's
        reader derives them again and ignores these), and the diagnostics."""
        own = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in ("counts", "diagnostics")}
        rates = {name: getattr(self.counts, name) for name in DERIVED}
        return asdict(self.counts) | rates | asdict(self.diagnostics) | own


def share(part: float, whole: float) -> float | None:
    """part / whole; None where there is nothing to divide by."""
    return part / whole if whole > 0 else None


def decode_rate(tokens_after_first: int, seconds: float) -> float | None:
    """Tokens a second after the first token; None for fewer than two tokens."""
    return tokens_after_first / seconds if tokens_after_first >= 1 and seconds > 0 else None


def position_rates(accepted_at: list[int], drafted_at: list[int]) -> list[float]:
    return [a / d for a, d in zip(accepted_at, drafted_at)]


DERIVED = ("acceptance_rate", "mean_accepted_length", "accepted_by_position", "tokens_per_second",
           "predicted_tokens_per_second", "speedup")
"""TurnCounts's rates: written in a turn's JSON, never read back."""


@dataclass(frozen=True, slots=True)
class ContextEvent:
    """The conversation did not fit the context, so turns were left out of the prompt (the
    history keeps them): before the reply (`during_reply` False), or when the reply reached the
    end of the context and the target evaluated the shorter prompt and the reply so far again."""

    left_out: int
    """Turns of the conversation the model no longer sees."""
    prompt_tokens: int
    """Tokens of the prompt the reply goes on from."""
    during_reply: bool = False
    reeval_tokens: int = 0
    """Tokens the target evaluated again to go on (0 before the reply)."""
    reeval_s: float = 0.0
    """Seconds that re-evaluation took (not counted in the decode rate)."""
    type: str = field(default="context", init=False)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


Event = TokenEvent | RoundEvent | TurnEvent | ContextEvent


def turn_of(events: Iterable[Event]) -> TurnEvent:
    """The turn summary that ends a stream (the whole stream is consumed)."""
    last: Event | None = None
    for event in events:
        last = event
    if not isinstance(last, TurnEvent):
        raise ValueError("the stream did not end with a turn summary")
    return last
