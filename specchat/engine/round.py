"""One round: the plan, the draft, one verify pass of the target, and the commit.

The target evaluates the committed tokens it has not seen (usually one) followed by the draft,
in a single batch, with logits only at the positions verification needs. Both KV caches are
then cut back to the committed tokens, before any of the round's events are handed out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from specchat.engine import kvsync
from specchat.engine.backend import Backend
from specchat.engine.committed import CommittedReply
from specchat.engine.drafters import Drafter
from specchat.engine.events import Event, RoundEvent, TokenEvent, TokenKind
from specchat.engine.outcome import Checked, Outcome
from specchat.engine.policy import Policy, Seen
from specchat.engine.sampling import SamplingParams, row_summary
from specchat.engine.text_kind import text_kind
from specchat.engine.tree import DraftTree, verify_tree
from specchat.engine.types import Draft, Plan, RowSummary
from specchat.engine.verify import verify_chain


@dataclass(frozen=True)
class RoundModels:
    """What a round runs on: the engine's models, sampling and policy as they are now."""

    target: Backend
    drafter: Drafter
    sampling: SamplingParams
    rng: np.random.Generator
    policy: Policy
    n_min: int
    """A draft shorter than this is dropped and the round is a plain target step."""


@dataclass(frozen=True)
class Verified:
    """A verify pass: what it decided, its logits rows and their summaries, the target's
    distributions where it samples, and the padding the batch carried."""

    outcome: Outcome
    rows: np.ndarray
    summaries: list[RowSummary]
    p_dists: list[np.ndarray] | None
    pad: int

    def p(self, row: int, token: int) -> float:
        """The target's probability of `token` at `row`, after the sampling transforms."""
        if self.p_dists is not None:
            return float(self.p_dists[row][token])
        return float(np.exp(self.rows[row][token] - self.summaries[row].lse))


@dataclass(frozen=True)
class Settled:
    """A verified and committed round: its token events, what verification decided, the verify
    pass's batch (padding included; 0 where it also read a backlog), and the target's top
    probability at each position it committed (how predictable the text is)."""

    events: list[Event]
    outcome: Outcome
    batch: int
    confidence: list[float]


def play(m: RoundModels, round_no: int, committed: list[int], reply: CommittedReply, cap: int,
         clock: Callable[[], float], t_start: float) -> tuple[list[Event], RoundEvent]:
    """A round of at most `cap` draft tokens: its events, with its summary."""
    t0 = clock()
    plan = m.policy.plan(cap, writing=text_kind(reply.text))
    draft = m.drafter.propose(committed, plan) if cap > 0 else Draft()
    if len(draft) < m.n_min:
        draft = replace(draft, tokens=[], q=[], conf=[], dists=None, branches=[])
    elif draft.branches and not m.target.can_tree:  # loading.py said so once
        draft = replace(draft, branches=[])
    t1 = clock()
    before = len(reply.ids)
    done = settle(m, round_no, committed, draft, reply, plan)
    t2 = clock()
    outcome = done.outcome
    seen = Seen(outcome.chain_accepted, outcome.branch, t1 - t0, t2 - t1, done.batch,
                done.confidence)
    expected = m.policy.observe(draft, seen, predict=round_no > 0)
    declined = plan.declined and not draft.tokens
    return done.events, RoundEvent(
        round=round_no, k=plan.asked, drafted=len(draft),
        accepted=len(outcome.stood), draft_s=t1 - t0, verify_s=t2 - t1,
        emitted=len(reply.ids) - before, t_s=t2 - t_start, source=draft.source,
        declined=declined, why=plan.why if declined else "",
        resumed=plan.resumed if draft.tokens else "", expected_tokens=expected.tokens,
        expected_s=expected.seconds, draft_pieces=draft.own_pieces,
        target_conf=expected.target_conf, catchup_tokens=draft.caught_up,
        catchup_s=draft.cost.catchup_s if draft.caught_up else 0.0,
        branch_nodes=draft.nodes - len(draft), branches_tested=outcome.branches_tested,
        branch_stood=outcome.branch is not None)


def settle(m: RoundModels, round_no: int, committed: list[int], draft: Draft,
           reply: CommittedReply, plan: Plan | None = None) -> Settled:
    """Verify `draft` (padded as `plan` prices batches), commit what stands, cut both caches
    back to the committed tokens."""
    todo = kvsync.pending(m.target, committed)
    if draft.branches:
        verified = _verify_tree(m, todo, draft)
    else:
        verified = _verify_chain(m, todo, draft, _padding(m.target, todo, draft, committed, plan))
    events = _commit(m.target, round_no, verified, committed, reply)
    kvsync.release(m.target, committed)  # the padding's entries go with the rejected
    m.drafter.release(committed)
    batch = draft.nodes + verified.pad + 1 if len(todo) == 1 else 0
    summaries = verified.summaries
    confidence = [verified.p(row, summaries[row].top) for row in verified.outcome.rows]
    return Settled(events, verified.outcome, batch, confidence)


def _read_rows(m: RoundModels, rows: np.ndarray
               ) -> tuple[list[RowSummary], list[np.ndarray] | None]:
    """Each row's summary (its argmax decides greedy verdicts), and the target's
    distributions where it samples."""
    summaries = [row_summary(row) for row in rows]
    if m.sampling.greedy:
        return summaries, None
    return summaries, [m.sampling.distribution(row) for row in rows]


def _verify_chain(m: RoundModels, todo: list[int], draft: Draft, pad: list[int]) -> Verified:
    rows = m.target.eval(todo + draft.tokens + pad, len(todo) - 1)[:len(draft) + 1]
    summaries, p_dists = _read_rows(m, rows)
    return Verified(verify_chain(draft, summaries, p_dists, m.rng), rows, summaries, p_dists,
                    len(pad))


def _verify_tree(m: RoundModels, todo: list[int], draft: Draft) -> Verified:
    """The chain and its branches in one pass (engine/tree.py); the cache keeps the path
    that stood."""
    tree = DraftTree.of(draft)
    rows = m.target.eval_tree(todo, tree.tokens, tree.parents)
    summaries, p_dists = _read_rows(m, rows)
    outcome = verify_tree(tree, summaries, p_dists, m.rng)
    m.target.keep_path(outcome.kept)
    return Verified(outcome, rows, summaries, p_dists, 0)


def _commit(target: Backend, round_no: int, verified: Verified, committed: list[int],
            reply: CommittedReply) -> list[Event]:
    """Commit the draft tokens that stood and the target's own token (its correction, the
    bonus, or a plain step's); the events of those and of each refused draft token."""
    events: list[Event] = []
    base = len(reply.ids)
    gaps = [s.gap for s in verified.summaries]

    def commit(c: Checked, kind: TokenKind) -> bool:
        committed.append(c.token)
        piece = reply.add(c.token)
        if piece is not None:
            events.append(TokenEvent(
                kind=kind, id=c.token, text=piece, position=len(reply.ids) - 1,
                round=round_no, p=verified.p(c.row, c.token),
                q=c.q if kind is TokenKind.ACCEPTED else None, logit_gap=gaps[c.row], u=c.u,
                branch=c.on_branch))
        return not reply.stop_reason

    outcome = verified.outcome
    for c in outcome.stood:
        if not commit(c, TokenKind.ACCEPTED):
            return events
    for c in outcome.refused:
        events.append(TokenEvent(
            kind=TokenKind.REJECTED, id=c.token,
            text=target.token_bytes(c.token).decode("utf-8", "replace"),
            position=base + c.depth, round=round_no, p=verified.p(c.row, c.token), q=c.q,
            logit_gap=gaps[c.row], u=c.u, branch=c.on_branch))
    commit(Checked(outcome.next_row, outcome.next_token, 0.0, None, 0), outcome.kind)
    return events


def _padding(target: Backend, todo: list[int], draft: Draft, committed: list[int],
             plan: Plan | None) -> list[int]:
    """Tokens to append to a verify batch that the plan says a larger batch verifies cheaper
    than (`Plan.batch_for`), within the context. They come after every token verified, so no
    row that counts can attend to them (causal attention); their rows are dropped and their
    cache entries cut back with the rejected tokens. The draft's last token repeated: where it
    turns out to be the next committed token, its entry is kept, rightly, as it was computed
    over the committed prefix."""
    if len(todo) != 1 or not draft.tokens or plan is None:
        return []
    n = 1 + len(draft)
    room = target.n_ctx - len(committed) - len(draft)
    return draft.tokens[-1:] * max(0, min(plan.batch_for(n) - n, room))
