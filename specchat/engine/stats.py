"""Counting a turn as it runs, and the turn summary built from those counts.

Every number here is a count or a `time.perf_counter()` difference taken by the engine; nothing
is estimated. What each field measures is documented on `TurnEvent`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specchat.engine.events import TurnEvent


@dataclass
class TurnCounter:
    target_passes_at_start: int
    draft_passes_at_start: int
    n_drafted: int = 0
    n_accepted: int = 0
    spec_rounds: int = 0
    spec_emitted: int = 0
    drafted_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    last_accepted: int = 0
    last_emitted: int = 0

    def add_round(self, drafted: int, accepted: int, emitted: int, speculative: bool) -> None:
        self.last_accepted, self.last_emitted = accepted, emitted
        self.n_drafted += drafted
        self.n_accepted += accepted
        if speculative:
            self.spec_rounds += 1
            self.spec_emitted += emitted
        while len(self.drafted_at) < drafted:
            self.drafted_at.append(0)
            self.accepted_at.append(0)
        for i in range(drafted):
            self.drafted_at[i] += 1
            self.accepted_at[i] += i < accepted

    def turn_event(
        self,
        *,
        reply_text: str,
        reply_ids: list[int],
        prompt_ids: list[int],
        t_start: float,
        t_first: float | None,
        t_end: float,
        rounds: int,
        target_passes: int,
        draft_passes: int,
        draft: str,
        k: int,
        stop_reason: str,
    ) -> TurnEvent:
        n = len(reply_ids)
        first = t_first if t_first is not None else t_end
        decode_s = t_end - first
        return TurnEvent(
            text=reply_text,
            token_ids=list(reply_ids),
            prompt_token_ids=prompt_ids,
            n_tokens=n,
            n_drafted=self.n_drafted,
            n_accepted=self.n_accepted,
            acceptance_rate=self.n_accepted / self.n_drafted if self.n_drafted else None,
            mean_accepted_length=self.spec_emitted / self.spec_rounds if self.spec_rounds else None,
            accepted_by_position=[a / d for a, d in zip(self.accepted_at, self.drafted_at)],
            tokens_per_second=(n - 1) / decode_s if n > 1 and decode_s > 0 else None,
            ttft_s=first - t_start,
            decode_s=decode_s,
            wall_s=t_end - t_start,
            target_passes=target_passes - self.target_passes_at_start,
            draft_passes=draft_passes - self.draft_passes_at_start,
            rounds=rounds,
            draft=draft,
            k=k,
            stop_reason=stop_reason,
        )
