"""The speculation loop: draft, verify in one target pass, emit a verdict for every token.

Each round the target evaluates the committed tokens it has not seen (usually one) followed by
the draft, in a single batch, with logits only at the positions verification needs. After the
round both KV caches are cut back to the committed tokens, and only then are the round's events
handed out, so a consumer that stops listening (or cancels) always leaves consistent caches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from specchat.engine import kvsync
from specchat.engine.backend import Backend
from specchat.engine.baseline import Baseline, ReplyClock
from specchat.engine.committed import CommittedReply, GenerationSettings
from specchat.engine.drafters import Drafter
from specchat.engine.events import ContextEvent, Event, RoundEvent, TokenEvent, TokenKind
from specchat.engine.policy import AdaptivePolicy, CostModel, FixedPolicy, Policy, TreeSettings
from specchat.engine.sampling import SamplingParams, row_summary
from specchat.engine.stats import TurnStats
from specchat.engine.text_kind import text_kind
from specchat.engine.tree import (
    DraftTree,
    tested_branches,
    verify_tree_greedy,
    verify_tree_sampling,
)
from specchat.engine.types import Draft, FittedPrompt, MachineWatch, RowSummary
from specchat.engine.verify import verify_greedy, verify_sampling
from specchat.errors import ContextOverflowError


@dataclass(frozen=True)
class _Outcome:
    """What a round's verification decided, as the events need it: each draft token that stood
    (the logits row it was checked at, its token, q and u), each refused (the same, its draft
    position and whether it was on a branch), and the target's own next token."""

    stood: list[tuple[int, int, float, float | None, bool]]
    refused: list[tuple[int, int, float, float | None, int, bool]]
    next_row: int
    next_token: int
    kind: TokenKind
    chain_accepted: int
    """The chain's draft tokens that stood (the policy's acceptance by position)."""
    branch: int | None = None
    """The branch of the draft tree that stood, if one did (its index in `Draft.branches`)."""
    branches_tested: int = 0
    """Alternatives tested where the chain was refused, up to the one that stood."""

    @property
    def rows(self) -> list[int]:
        """The rows of the positions the round committed."""
        return [row for row, *_ in self.stood] + [self.next_row]


_Verified = tuple[_Outcome, np.ndarray, list[RowSummary], list[np.ndarray] | None, list[int]]
"""A verify pass: what it decided, the logits rows, their summaries, the target's
distributions (sampling), and the padding the batch carried."""

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
    adaptive: bool = False
    """Choose each round's draft length from measured costs and acceptance (engine/policy/)."""
    tree: TreeSettings | None = None
    """Draft trees: alternatives beside unsure draft tokens, verified with the chain (None:
    chains)."""

    def policy(self, costs: CostModel | None = None) -> Policy:
        if self.adaptive:
            return AdaptivePolicy(self.k, costs, self.tree)
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
        watch, threads = self._begin_watch()
        clock = ReplyClock()
        t_start = clock()
        committed = list(prompt_ids)
        reply = CommittedReply(self.target, settings)
        stats = TurnStats()
        baseline = Baseline(settings, self._plain_steps_s, self.drafter.speculates)
        passes_at_start = (self.target.passes, self.drafter.passes)
        self.policy.start_turn()
        round_no = 0
        while not reply.stop_reason:
            if cancel is not None and cancel.is_set():
                reply.stop_reason = "cancelled"
                break
            free = self.target.n_ctx - len(committed)  # draft tokens that still fit
            if free < 0:  # the last committed token cannot be evaluated any more
                if (refilled := self._shift_context(reply, fit_prompt, clock)) is None:
                    reply.stop_reason = "context_full"
                    break
                committed, shift = refilled
                stats.add_context(shift)
                yield from clock.hand_out([shift])
                continue
            cap = 0
            if round_no > 0:  # the first token of a turn is the target's alone
                cap = max(0, min(free, settings.max_tokens - len(reply.ids) - 1))
            events, summary = self._draft_and_verify(round_no, committed, reply, cap, clock,
                                                     t_start)
            stats.add_round(summary)
            round_no += 1
            yield from clock.hand_out([*events, summary])
            if not reply.stop_reason and not (cancel is not None and cancel.is_set()):
                baseline.between_rounds(round_no, committed, clock)
        reply.finish()
        kvsync.release(self.target, committed)
        self.drafter.release(committed)
        wall_s = clock() - t_start
        rate, source = baseline.rate(stats.tokens_per_second, committed, reply.stop_reason)
        yield stats.turn_event(
            text=reply.text, token_ids=reply.ids, prompt_ids=list(prompt_ids), wall_s=wall_s,
            target_passes=self.target.passes - passes_at_start[0] - len(baseline.steps),
            draft_passes=self.drafter.passes - passes_at_start[1], draft=self.drafter.name,
            k=self.draft_settings.k, policy=self.policy.name, stop_reason=reply.stop_reason,
            baseline=rate, baseline_source=source, others_cpu=watch.end() if watch else None,
            baseline_steps_s=[s for _, s in baseline.steps] if rate else [], threads=threads)

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

    def _draft_and_verify(self, round_no: int, committed: list[int], reply: CommittedReply, cap: int,
                          clock: Callable[[], float], t_start: float
                          ) -> tuple[list[Event], RoundEvent]:
        """One round: the plan, the draft (at most `cap` tokens), the verify pass, what the
        policy learns from it, and the round's events with its summary last."""
        t0 = clock()
        self.policy.costs.writing(text_kind(reply.text))
        plan = self.policy.plan(cap)
        draft = self.drafter.propose(committed, plan) if cap > 0 else Draft()
        if len(draft) < self.draft_settings.n_min:
            draft = replace(draft, tokens=[], q=[], conf=[], dists=None, branches=[])
        elif draft.branches and not self.target.can_tree:  # loading.py said so once
            draft = replace(draft, branches=[])
        t1 = clock()
        expected = self.policy.costs.expect(draft) if round_no > 0 else None
        target_conf = self.policy.costs.reply.target_conf
        before = len(reply.ids)
        events, outcome, batch, confidence = self._round(round_no, committed, draft, reply)
        t2 = clock()
        n_accepted = outcome.chain_accepted
        self.policy.costs.observe(draft, n_accepted, t1 - t0, t2 - t1, batch, confidence,
                                  branch_stood=outcome.branch)
        summary = RoundEvent(
            round=round_no, k=plan.asked, drafted=len(draft),
            accepted=len(outcome.stood), draft_s=t1 - t0, verify_s=t2 - t1,
            emitted=len(reply.ids) - before, t_s=t2 - t_start, source=draft.source,
            declined=plan.declined and not draft.tokens,
            expected_tokens=expected[0] if expected else None,
            expected_s=expected[1] if expected else None, draft_pieces=draft.own_pieces,
            target_conf=target_conf, catchup_tokens=draft.caught_up,
            catchup_s=draft.catchup_s if draft.caught_up else 0.0,
            branch_nodes=draft.nodes - len(draft), branches_tested=outcome.branches_tested,
            branch_stood=outcome.branch is not None,
        )
        return events, summary

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
        """Evaluate what the target's cache lacks of `committed` but its last token (which the
        next round evaluates, as always); return how many tokens that was. The drafter catches
        up at its next proposal, as after any new turn."""
        todo = kvsync.pending(self.target, committed)[:-1]
        if todo:
            self.target.eval(todo, len(todo) - 1)
        self.drafter.release(committed)
        return len(todo)

    def _plain_steps_s(self, committed: list[int], n: int) -> list[float]:
        """Seconds of each plain target step at the depth `committed` reached: n rounds of
        the same `_round` a target-only turn runs, continuing the text; then both caches are
        cut back to `committed`, and the random stream restored (a sampled step draws from it),
        as if the steps never ran. Fewer (none) where the context is full."""
        rng_state = self.rng.bit_generator.state
        seq = list(committed)
        scratch = CommittedReply(self.target, GenerationSettings(max_tokens=n + 1))
        times = []
        try:
            for i in range(n):  # past an end of generation too: each is one target step all the same
                t0 = time.perf_counter()
                self._round(i + 1, seq, Draft(), scratch)
                times.append(time.perf_counter() - t0)
        except ContextOverflowError:
            pass
        kvsync.release(self.target, committed)
        self.drafter.release(committed)
        self.rng.bit_generator.state = rng_state
        return times

    # -- one round --------------------------------------------------------------------------
    def _round(
        self, round_no: int, committed: list[int], draft: Draft, reply: CommittedReply
    ) -> tuple[list[Event], _Outcome, int, list[float]]:
        """Verify `draft`, commit what stands, and return the token events, what verification
        decided, the verify pass's batch (padding included; 0 where it also evaluated a
        backlog), and the target's top probability at each position the round committed (how
        predictable the text is, for the policy)."""
        todo = kvsync.pending(self.target, committed)
        if draft.branches:
            outcome, rows, summaries, p_dists, pad = self._verify_tree(todo, draft)
        else:
            outcome, rows, summaries, p_dists, pad = self._verify_chain(todo, draft, committed)

        def p_of(i: int, tok: int) -> float:
            if p_dists is not None:
                return float(p_dists[i][tok])
            return float(np.exp(rows[i][tok] - summaries[i].lse))

        events = self._commit(round_no, outcome, summaries, p_of, committed, reply)
        kvsync.release(self.target, committed)  # the padding's entries go with the rejected
        self.drafter.release(committed)
        batch = draft.nodes + len(pad) + 1 if len(todo) == 1 else 0
        confidence = [p_of(row, summaries[row].top) for row in outcome.rows]
        return events, outcome, batch, confidence

    def _read_rows(self, rows: np.ndarray) -> tuple[list[RowSummary], list[np.ndarray] | None]:
        """Each row's summary (its argmax decides greedy verdicts), and the target's
        distributions where it samples."""
        summaries = [row_summary(row) for row in rows]
        if self.sampling.greedy:
            return summaries, None
        return summaries, [self.sampling.distribution(row) for row in rows]

    def _verify_chain(self, todo: list[int], draft: Draft, committed: list[int]) -> _Verified:
        pad = self._padding(todo, draft, committed)
        rows = self.target.eval(todo + draft.tokens + pad, len(todo) - 1)[:len(draft) + 1]
        summaries, p_dists = self._read_rows(rows)
        if p_dists is None:
            verdict = verify_greedy(draft.tokens, [s.top for s in summaries])
        else:
            verdict = verify_sampling(draft.tokens, draft.dists, p_dists, self.rng)
        n, us = verdict.n_accepted, verdict.uniforms

        def u_of(i: int) -> float | None:
            return us[i] if i < len(us) else None

        outcome = _Outcome(
            stood=[(i, draft.tokens[i], draft.q[i], u_of(i), False) for i in range(n)],
            refused=[(j, draft.tokens[j], draft.q[j], u_of(j), j, False)
                     for j in range(n, len(draft))],
            next_row=n, next_token=verdict.next_token,
            kind=(TokenKind.TARGET if not draft.tokens else
                  TokenKind.BONUS if n == len(draft) else TokenKind.CORRECTED),
            chain_accepted=n)
        return outcome, rows, summaries, p_dists, pad

    def _verify_tree(self, todo: list[int], draft: Draft) -> _Verified:
        """The chain and its branches in one pass (engine/tree.py); the cache keeps the path
        that stood."""
        tree = DraftTree.of(draft)
        rows = self.target.eval_tree(todo, tree.tokens, tree.parents)
        summaries, p_dists = self._read_rows(rows)
        if p_dists is None:
            verdict = verify_tree_greedy(tree, [s.top for s in summaries])
        else:
            verdict = verify_tree_sampling(tree, p_dists, self.rng)
        self.target.keep_path(verdict.path)
        on_path = set(verdict.path)
        last = verdict.path[-1] if verdict.path else -1
        outcome = _Outcome(
            stood=[(tree.parents[c] + 1, tree.tokens[c], tree.q[c], verdict.uniforms.get(c),
                    c >= tree.chain) for c in verdict.path],
            refused=[(tree.parents[c] + 1, tree.tokens[c], tree.q[c], verdict.uniforms.get(c),
                      tree.depth(c), c >= tree.chain)
                     for c in range(len(tree)) if c not in on_path],
            next_row=last + 1, next_token=verdict.next_token,
            kind=TokenKind.CORRECTED if tree.children(last) else TokenKind.BONUS,
            chain_accepted=verdict.chain_accepted,
            branch=tree.branch[last] if last >= tree.chain else None,
            branches_tested=tested_branches(tree, verdict))
        return outcome, rows, summaries, p_dists, []

    def _commit(self, round_no: int, outcome: _Outcome, summaries: list[RowSummary],
                p_of: Callable[[int, int], float], committed: list[int],
                reply: CommittedReply) -> list[Event]:
        """Commit the draft tokens that stood and the target's own token (its correction, the
        bonus, or a plain step's); the events of those and of each refused draft token."""
        events: list[Event] = []
        base = len(reply.ids)

        def commit(row: int, tok: int, kind: TokenKind, q: float | None, u: float | None,
                   branch: bool = False) -> bool:
            committed.append(tok)
            piece = reply.add(tok)
            if piece is not None:
                events.append(TokenEvent(
                    kind=kind, id=tok, text=piece, position=len(reply.ids) - 1, round=round_no,
                    p=p_of(row, tok), q=q, logit_gap=summaries[row].gap, u=u, branch=branch))
            return not reply.stop_reason

        for row, tok, q, u, branch in outcome.stood:
            if not commit(row, tok, TokenKind.ACCEPTED, q, u, branch):
                return events
        for row, tok, q, u, depth, branch in outcome.refused:
            events.append(TokenEvent(
                kind=TokenKind.REJECTED, id=tok,
                text=self.target.token_bytes(tok).decode("utf-8", "replace"),
                position=base + depth, round=round_no, p=p_of(row, tok), q=q,
                logit_gap=summaries[row].gap, u=u, branch=branch))
        commit(outcome.next_row, outcome.next_token, outcome.kind, None, None)
        return events

    def _padding(self, todo: list[int], draft: Draft, committed: list[int]) -> list[int]:
        """Tokens to append to a verify batch that the cost model knows a larger batch verifies
        cheaper than (`CostModel.batch_for`), within the context. They come after every token
        verified, so no row that counts can attend to them (causal attention); their rows are
        dropped and their cache entries cut back with the rejected tokens. The draft's last
        token repeated: where it turns out to be the next committed token, its entry is kept,
        rightly, as it was computed over the committed prefix."""
        if len(todo) != 1 or not draft.tokens:
            return []
        n = 1 + len(draft)
        room = self.target.n_ctx - len(committed) - len(draft)
        return draft.tokens[-1:] * max(0, min(self.policy.costs.machine.batch_for(n) - n, room))
