"""Verification: which draft tokens the target keeps, and the token it adds.

Greedy: accept while the target's argmax equals the draft token; then the target's argmax is the
correction (or, after a fully accepted draft, the bonus token).

Sampling (Leviathan et al. 2023, Chen et al. 2023): accept draft token d with probability
min(1, p(d)/q(d)); at the first rejection draw from norm(max(0, p - q)); after a full accept draw
the bonus from the next p. The output then follows the target's distribution exactly. A drafter
without probabilities (n-gram) proposes a point mass, q = 1 on its token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from specchat.engine.events import TokenKind
from specchat.engine.outcome import Checked, Outcome
from specchat.engine.sampling import sample
from specchat.engine.types import Draft, RowSummary


@dataclass(frozen=True)
class Verdict:
    n_accepted: int
    next_token: int
    """The correction (n_accepted < len(draft)) or the bonus token."""
    uniforms: list[float] = field(default_factory=list)
    """The u drawn for each tested draft token (sampling only): accepted iff u < p/q."""


def verify_greedy(draft: Sequence[int], target_argmax: Sequence[int]) -> Verdict:
    """`target_argmax[i]` is the target's choice for the position of `draft[i]`; one more entry
    follows for the bonus position."""
    n = 0
    while n < len(draft) and draft[n] == target_argmax[n]:
        n += 1
    return Verdict(n, int(target_argmax[n]))


def aligned(q: np.ndarray, size: int) -> np.ndarray:
    """The draft distribution on the target's vocabulary (sizes may differ by a little)."""
    if q.size == size:
        return q
    out = np.zeros(size, dtype=q.dtype)
    n = min(size, q.size)
    out[:n] = q[:n]
    return out


def verify_sampling(
    draft: Sequence[int],
    q_dists: Sequence[np.ndarray] | None,
    p_dists: Sequence[np.ndarray],
    rng: np.random.Generator,
) -> Verdict:
    """`p_dists` has len(draft) + 1 rows; `q_dists` is None for a point-mass drafter."""
    uniforms: list[float] = []
    for i, tok in enumerate(draft):
        p = p_dists[i]
        q = None if q_dists is None else aligned(q_dists[i], p.size)
        q_tok = 1.0 if q is None else float(q[tok])
        u = float(rng.random())
        uniforms.append(u)
        if q_tok > 0 and u * q_tok < p[tok]:  # u < p/q without dividing
            continue
        if q is None:
            residual = p.copy()
            residual[tok] = 0.0
        else:
            residual = np.maximum(p - q, 0.0)
        if residual.sum() <= 0.0:  # p == q up to rounding: rejection had probability 0
            residual = p
        return Verdict(i, sample(residual, rng), uniforms)
    return Verdict(len(draft), sample(p_dists[len(draft)], rng), uniforms)


def verify_chain(draft: Draft, summaries: Sequence[RowSummary],
                 p_dists: Sequence[np.ndarray] | None, rng: np.random.Generator) -> Outcome:
    """A chain's outcome: greedy where `p_dists` is None (the rows' argmax decides), else the
    sampling rule on the target's distributions."""
    if p_dists is None:
        verdict = verify_greedy(draft.tokens, [s.top for s in summaries])
    else:
        verdict = verify_sampling(draft.tokens, draft.dists, p_dists, rng)
    n, us = verdict.n_accepted, verdict.uniforms

    def checked(i: int) -> Checked:
        return Checked(i, draft.tokens[i], draft.q[i], us[i] if i < len(us) else None, i)

    kind = (TokenKind.TARGET if not draft.tokens else
            TokenKind.BONUS if n == len(draft) else TokenKind.CORRECTED)
    return Outcome(stood=[checked(i) for i in range(n)],
                   refused=[checked(j) for j in range(n, len(draft))],
                   next_row=n, next_token=verdict.next_token, kind=kind, chain_accepted=n)
