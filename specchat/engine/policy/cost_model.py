"""The policy's running estimate of a round: what this machine charges (`MachineCosts`), how
often each source is right (`Acceptance`) and where the reply is (`ReplyState`), learned from
every finished round and read as expected tokens and seconds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specchat.engine.policy.acceptance import Acceptance
from specchat.engine.policy.branching import POINT_CHANCE, BranchRates, chance_given_refused
from specchat.engine.policy.machine import MachineCosts
from specchat.engine.policy.rates import Recent, Yield, expected_tokens
from specchat.engine.policy.reply import ReplyLengths, ReplyState
from specchat.engine.types import Draft

PAYBACK_TOKENS = 32
"""A catch-up is paid up front and must be earned back within the reply's next 32 tokens, or
the more that the last replies' median length leaves it (`ReplyLengths`), and never beyond its
token limit: replies often end well before that limit."""


@dataclass
class CostModel:
    machine: MachineCosts = field(default_factory=MachineCosts)
    """Kept for the models' lifetime."""
    acceptance: Acceptance = field(default_factory=Acceptance)
    """Kept across conversations, shrunk at each new one."""
    reply: ReplyState = field(default_factory=ReplyState)
    """Started again with each reply."""
    branches: BranchRates = field(default_factory=BranchRates)
    """How often a draft tree's alternatives stood; kept as acceptance is."""
    lengths: ReplyLengths = field(default_factory=ReplyLengths)
    """How long replies ran; kept for the models' lifetime."""

    def writing(self, kind: str) -> None:
        """What the reply writes where the next round begins (the engine says, every round)."""
        self.reply.kind = kind

    def predicted_accept(self, source: str, optimistic: bool = False) -> float | None:
        return self.acceptance.predicted(source, self.reply, optimistic)

    def reply_left(self) -> int:
        """Tokens the reply now written may still run, as long as the last replies ran (each
        position of the running confidence is a token of the reply)."""
        return self.lengths.left(self.reply.target_conf_n)

    def pays_back(self, rate: float, plain: float, catchup_s: float, left: int,
                  whole_reply: bool = False) -> bool:
        """Drafting at `rate` beats plain steps over the reply's next tokens (at most `left`;
        all of them where `whole_reply`), once the draft model has caught up (`catchup_s`,
        paid once: a drafting model stays in step)."""
        ahead = max(left, 1) if whole_reply else min(
            max(left, 1), max(PAYBACK_TOKENS, self.reply_left()))
        return ahead / rate + catchup_s < ahead / plain

    def empty_rate(self, source: str) -> float:
        return self.acceptance.empty_rate(source, self.reply)

    def expect(self, draft: Draft) -> tuple[float, float]:
        """(expected tokens, expected seconds) of a round that verifies `draft`."""
        rates, machine = self.acceptance, self.machine
        if draft.conf:
            accept = [rates.confidence_rate(draft.source, c) for c in draft.conf]
        else:
            accept = [rates.position_rate(draft.source, i) for i in range(len(draft))]
        seconds = machine.check_s(1 + len(draft))
        if draft.drafter_ran:
            seconds += machine.draft_s(draft.source, len(draft), draft.uses_passes, draft.cost.behind)
        return expected_tokens(accept), seconds

    def observe(self, draft: Draft, accepted: int, draft_s: float, verify_s: float, batch: int,
                target_conf: Sequence[float] = (), branch_stood: int | None = None) -> None:
        """Learn from a finished round: a verify pass of `batch` tokens (padding and a tree's
        branches included; 0 where the pass also evaluated a backlog, a prefill, whose time is
        no verify cost) in `verify_s`, the draft in `draft_s`, `accepted` of the chain's tokens
        stood, the branch that stood (its index in `draft.branches`), and the target's top
        probability at each position the round committed."""
        self._learn_branches(draft, accepted, branch_stood)
        if batch:
            self.machine.learn_verify(batch, verify_s)
        source = draft.source
        tested = min(len(draft), accepted + 1)  # tokens after the first refusal were not tested
        if source:  # before the running confidence moves on: both key on where the round began
            caught_up_s = self._learn_draft_costs(draft, draft_s)
            at, where = self.reply.conf_bin, self.reply.where(source)
            if batch and draft.drafter_ran:
                spent = draft_s - caught_up_s + verify_s
                self.reply.recent.setdefault(where, Recent()).add(accepted + 1, spent)
                if at is not None:
                    self.reply.realized.setdefault((where, at), Yield()).add(accepted + 1, spent)
            self.acceptance.observe(source, accepted, tested, draft.conf)
        self.acceptance.observe_target_conf(source, accepted, tested, self.reply)
        self.reply.move_confidence(target_conf)

    def _learn_branches(self, draft: Draft, accepted: int, stood: int | None) -> None:
        """Each alternative tested (the chain's token and the earlier ones at its position
        refused): whether it stood, against the draft's probability of it given that."""
        if not draft.branches:
            return
        q_before = draft.q[accepted] if accepted < len(draft) else 1.0
        for i, branch in enumerate(draft.branches):
            if branch.at != accepted:
                continue
            chance = (chance_given_refused(branch.q[0], q_before) if draft.conf
                      else POINT_CHANCE)  # a drafter without confidences: point masses
            self.branches.observe(draft.source, chance, i == stood)
            if i == stood:
                return
            q_before += branch.q[0]

    def _learn_draft_costs(self, draft: Draft, draft_s: float) -> float:
        """What a round's draft says of its source's costs; returns the seconds its pass spent
        catching up beyond the round's own correction or bonus (paid once, not the round's)."""
        source, machine = draft.source, self.machine
        if draft.uses_passes and draft.cost.catchup_s > 0:  # a pass ran: did it bring a draft?
            self.acceptance.observe_pass(source, not draft.tokens, self.reply)
        if not draft.uses_passes:
            if draft.tokens:
                machine.learn_pass(source, draft_s)
            return 0.0
        if draft.cost.later_draws:  # seconds a token: a pass that read a guess drew several
            machine.learn_pass(source, (draft_s - draft.cost.catchup_s) / draft.cost.later_draws)
        if draft.cost.behind > 1 and not draft.cost.widened:  # a widened pass's extra rows
            # are the guesses'. Until a pass is timed, the prior pass parts the catch-up from
            # the round's own seconds; only a timed pass teaches what a catch-up token costs
            known = machine.pass_time(source)
            pass_s = known if known is not None else machine.draft_s(source, 1, True)
            extra = max(0.0, draft.cost.catchup_s - pass_s) / (draft.cost.behind - 1)
            if known is not None:
                machine.learn_catchup(source, extra)
            return extra * max(0, draft.cost.behind - 2)
        return 0.0

    def new_conversation(self) -> None:
        """Keep what the machine costs; keep acceptance only as a prior."""
        self.acceptance.new_conversation()
        self.branches.new_conversation()

    def start_turn(self) -> None:
        """A reply begins: its state starts again (the rates and costs learned stay), and the
        last one's length joins those the next catch-ups are priced by."""
        self.lengths.add(self.reply.target_conf_n)
        self.reply = ReplyState()
