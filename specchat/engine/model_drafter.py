"""A draft model's drafter: it keeps its own KV cache in step with the committed tokens and
drafts token by token, asking the round's plan how far to go (engine/policy/), and draws a draft
tree's alternatives without replacement where the plan takes them."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from specchat.engine import kvsync
from specchat.engine.backend import Backend
from specchat.engine.draft_model import DraftModel
from specchat.engine.guessed_rows import GuessedRows
from specchat.engine.policy.branching import chance_given_refused
from specchat.engine.sampling import SamplingParams, row_summary, sample
from specchat.engine.types import Branch, Draft, DraftCost, Plan


class ModelDrafter(DraftModel):
    """A small model that shares the target's vocabulary proposes up to k tokens, stopping
    where the plan no longer keeps a token given the draft's top probability. Where its
    passes over a few tokens cost little more than over one, a pass also reads guessed next
    tokens and uses the rows after the ones it then proposes (engine/guessed_rows.py)."""

    def __init__(self, backend: Backend, sampling: SamplingParams, rng: np.random.Generator,
                 batch_steps: Sequence[float] = ()) -> None:
        super().__init__(backend, sampling, rng)
        self.name = backend.name
        self.guessed = GuessedRows(batch_steps)

    def propose(self, committed: Sequence[int], plan: Plan) -> Draft:
        feed = kvsync.pending(self.backend, committed)
        draft = Draft(dists=None if self.sampling.greedy else [], source=self.name,
                      uses_passes=True, cost=DraftCost(behind=len(feed)))
        k = min(plan.k(self.name, True, len(feed)), self.backend.n_ctx - len(committed))
        if k <= 0:
            return draft
        self.guessed.follow(committed)
        seq = list(committed)
        while True:
            t0 = time.perf_counter()
            extra = self.guessed.extra(seq, len(feed), k - len(draft) - 1)
            extra = extra[: self.backend.n_ctx - len(self.backend.tokens) - len(feed)]
            rows = self.backend.eval(feed + extra, len(feed) - 1)
            later = draft.cost.catchup_s > 0
            if not later:
                draft.cost.catchup_s, draft.cost.widened = time.perf_counter() - t0, bool(extra)
            for j, row in enumerate(rows):  # row j follows extra[j - 1]: the draft's own row
                draft.cost.later_draws += later  # while the guesses were its own tokens
                if not self._keep(draft, row, plan):
                    return draft
                seq.append(draft.tokens[-1])
                if len(draft) == k:
                    return draft
                if j == len(extra) or extra[j] != draft.tokens[-1]:
                    break
            if not plan.worth_a_pass(self.name, len(draft)):
                return draft
            feed = kvsync.pending(self.backend, seq)

    def _keep(self, draft: Draft, row: np.ndarray, plan: Plan) -> bool:
        """Draw the next token from `row` and add it to `draft` if the plan keeps it, with the
        alternatives beside it the plan asks for (a draft tree)."""
        if draft.dists is None:  # greedy: argmax and its softmax probability, no full copy
            tok, _, lse = row_summary(row)
            q = top = float(np.exp(row[tok] - lse))
        else:
            probs = self.sampling.distribution(row)
            tok = sample(probs, self.rng)
            q, top = float(probs[tok]), float(probs.max())
        if not plan.keep(self.name, len(draft), top):
            return False
        if plan.width > 1:  # told of every kept token: the round's reach follows the chain
            others: list[tuple[int, float]] = []
            chances: list[float] = []
            if top < plan.p_branch:  # only an unsure token's alternatives are worth finding
                others, chances = (self._next_best(row, tok, q, lse, plan.width - 1)
                                   if draft.dists is None
                                   else self._drawn_without(probs, tok, plan.width - 1))
            n = plan.alternatives(self.name, len(draft), top, chances)
            draft.branches.extend(
                Branch(len(draft), [alt], [p], None if draft.dists is None else [probs])
                for alt, p in others[:n])
        draft.tokens.append(tok)
        draft.q.append(q)
        draft.conf.append(top)
        if draft.dists is not None:
            draft.dists.append(probs)
        return True

    @staticmethod
    def _next_best(row: np.ndarray, tok: int, q: float, lse: float, n: int
                   ) -> tuple[list[tuple[int, float]], list[float]]:
        """Greedy: the n tokens after the argmax `tok` (probability `q`), best first, with their
        probabilities, and each one's chance once the tokens before it were refused (its share
        of the probability left): nothing is drawn, so every chance is known in advance."""
        top = np.argpartition(row, -(n + 1))[-(n + 1):]
        order = [int(t) for t in top[np.argsort(-row[top], kind="stable")] if t != tok][:n]
        others = [(t, float(np.exp(row[t] - lse))) for t in order]
        before, chances = q, []
        for _, p in others:
            chances.append(chance_given_refused(p, before))
            before += p
        return others, chances

    def _drawn_without(self, probs: np.ndarray, tok: int, n: int
                       ) -> tuple[list[tuple[int, float]], list[float]]:
        """Sampling: n tokens drawn from `probs` one after another, each without the tokens
        drawn before it (the chain's `tok` first), as the tree's rule tests them, with each
        one's chance as known before it was drawn: the expected share of a draw from what is
        left, sum(r^2) for r the renormalized rest. The plan decides how many to verify from
        these alone: a count read from the drawn tokens' own probabilities would keep a draw
        that is no longer one from r, and the rule would test it against the wrong r."""
        left = probs.astype(np.float64, copy=True)
        left[tok] = 0.0
        out, chances = [], []
        for _ in range(n):
            total = left.sum()
            if total <= 0.0:
                break
            chances.append(float(np.dot(left, left)) / (total * total))
            alt = sample(left, self.rng)
            out.append((alt, float(probs[alt])))
            left[alt] = 0.0
        return out, chances

    def release(self, committed: Sequence[int]) -> None:
        kvsync.release(self.backend, committed)

    def read(self, committed: Sequence[int]) -> int:
        return kvsync.read(self.backend, committed)
