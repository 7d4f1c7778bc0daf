"""A draft tree (the chain and its branches) laid out for one verify pass, and its verification.

Node i of the tree is row i + 1 of the target's pass; row 0 is the row after the last committed
token (the tree's root). Nodes come chain first, then each branch in the order it was drawn, so a
parent always comes before its children and the siblings below a node are in the order they were
drawn: the order the sampling rule tests them in.

Greedy: follow the target's argmax down the tree; where no child is the target's choice, that
choice is the correction, and at a leaf the target's next token is the bonus.

Sampling (recursive rejection sampling over siblings drawn without replacement: SpecInfer,
SpecTr, Jeon et al. 2024): at a node, with the target's distribution p, test its children in
order. A child x drawn from r (its drafter's distribution with the earlier siblings' tokens taken
out, renormalized; a point mass for the n-gram drafter) stands with probability min(1, p(x)/r(x));
where it does not, p becomes norm(max(0, p - r)) and the next child is tested against it. The
child that stands is committed and the rule goes on below it; where none stands, the next token
is drawn from the p left. Each test outputs exactly its p, so the reply follows the target's
distribution. A chain is the tree with one child a node, and the rule is then verify.py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from specchat.engine.events import TokenKind
from specchat.engine.outcome import Checked, Outcome
from specchat.engine.sampling import sample
from specchat.engine.types import Draft, RowSummary
from specchat.engine.verify import aligned


def depths(parents: Sequence[int]) -> list[int]:
    """Each node's draft position (0 for the root's children), parents before children."""
    out: list[int] = []
    for parent in parents:
        out.append(0 if parent < 0 else out[parent] + 1)
    return out


def leaves(parents: Sequence[int]) -> list[int]:
    """The nodes without children, in node order (a Draft's chain's last first)."""
    inner = set(parents)
    return [i for i in range(len(parents)) if i not in inner]


def path_to(parents: Sequence[int], node: int) -> list[int]:
    """The nodes from the root's child down to `node`."""
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


@dataclass(frozen=True)
class DraftTree:
    """The nodes of a draft in verify order."""

    tokens: list[int]
    parents: list[int]
    """Each node's parent node (-1: the root, the last committed token)."""
    q: list[float]
    """The drafter's probability of each node's token."""
    dists: list[np.ndarray | None]
    """The distribution each node was drawn from before its earlier siblings were taken out
    (None: a point mass)."""
    chain: int
    """Nodes 0..chain-1 are the chain; the rest are branches."""
    branch: list[int]
    """The branch (its index in the draft's `branches`) each node is on; -1 on the chain."""

    @classmethod
    def of(cls, draft: Draft) -> DraftTree:
        tokens, q = list(draft.tokens), list(draft.q)
        parents = list(range(-1, len(tokens) - 1))
        dists: list[np.ndarray | None] = (list(draft.dists) if draft.dists is not None
                                          else [None] * len(tokens))
        owner = [-1] * len(tokens)
        for b, branch in enumerate(draft.branches):
            parent = branch.at - 1
            for j, tok in enumerate(branch.tokens):
                tokens.append(tok)
                q.append(branch.q[j])
                parents.append(parent)
                dists.append(branch.dists[j] if branch.dists is not None else None)
                owner.append(b)
                parent = len(tokens) - 1
        return cls(tokens, parents, q, dists, len(draft.tokens), owner)

    def __len__(self) -> int:
        return len(self.tokens)

    def children(self, node: int) -> list[int]:
        return [i for i, p in enumerate(self.parents) if p == node]

    def depth(self, node: int) -> int:
        """Draft position of a node: 0 for the root's children."""
        return len(path_to(self.parents, node)) - 1

    def proposal(self, node: int, size: int) -> np.ndarray | None:
        """The distribution `node` was drawn from: its drafter's with the earlier siblings'
        tokens taken out, renormalized (None: a point mass; also where nothing is left)."""
        dist = self.dists[node]
        if dist is None:
            return None
        r = aligned(dist, size).astype(np.float64)
        for sib in self.children(self.parents[node]):
            if sib == node:
                break
            r[self.tokens[sib]] = 0.0
        total = r.sum()
        return r / total if total > 0 else None


@dataclass(frozen=True)
class TreeVerdict:
    path: list[int]
    """The nodes that stood, root to deepest."""
    next_token: int
    """The target's own token after them: a correction, or the bonus at a leaf."""
    uniforms: dict[int, float] = field(default_factory=dict)
    """The u each tested node was tested with (sampling only): it stood iff u < p/r."""

    @property
    def chain_accepted(self) -> int:
        """Chain tokens that stood (the path leaves the chain where a branch stood)."""
        n = 0
        while n < len(self.path) and self.path[n] == n:
            n += 1
        return n


def verify_tree_greedy(tree: DraftTree, target_argmax: Sequence[int]) -> TreeVerdict:
    """`target_argmax[0]` is the target's choice after the committed tokens, `[i + 1]` after
    node i."""
    path: list[int] = []
    node = -1
    while True:
        choice = int(target_argmax[node + 1])
        child = next((c for c in tree.children(node) if tree.tokens[c] == choice), None)
        if child is None:
            return TreeVerdict(path, choice)
        path.append(child)
        node = child


def verify_tree_sampling(tree: DraftTree, p_dists: Sequence[np.ndarray],
                         rng: np.random.Generator) -> TreeVerdict:
    """`p_dists[0]` is the target's distribution after the committed tokens, `[i + 1]` after
    node i."""
    path: list[int] = []
    uniforms: dict[int, float] = {}
    node = -1
    while True:
        p = p_dists[node + 1]
        for child in tree.children(node):
            tok = tree.tokens[child]
            r = tree.proposal(child, p.size)
            r_tok = 1.0 if r is None else float(r[tok])
            u = float(rng.random())
            uniforms[child] = u
            if r_tok > 0 and u * r_tok < p[tok]:  # u < p/r without dividing
                path.append(child)
                node = child
                break
            if r is None:
                residual = p.astype(np.float64, copy=True)
                residual[tok] = 0.0
            else:
                residual = np.maximum(p - r, 0.0)
            total = residual.sum()
            if total > 0.0:  # else p == r up to rounding: refusal had probability 0
                p = residual / total
        else:
            return TreeVerdict(path, sample(p, rng), uniforms)


def tested_branches(tree: DraftTree, verdict: TreeVerdict) -> int:
    """Alternatives tested where the chain was refused (beside the chain's first refused
    token), up to and with the one that stood: what a branch's chance is learned from."""
    at = verdict.chain_accepted
    if at >= tree.chain:
        return 0
    siblings = [c for c in tree.children(at - 1) if c >= tree.chain]
    stood = verdict.path[at] if len(verdict.path) > at else None
    return siblings.index(stood) + 1 if stood in siblings else len(siblings)


def verify_tree(tree: DraftTree, summaries: Sequence[RowSummary],
                p_dists: Sequence[np.ndarray] | None, rng: np.random.Generator) -> Outcome:
    """A draft tree's outcome: greedy where `p_dists` is None, else the sampling rule."""
    if p_dists is None:
        verdict = verify_tree_greedy(tree, [s.top for s in summaries])
    else:
        verdict = verify_tree_sampling(tree, p_dists, rng)
    on_path = set(verdict.path)
    last = verdict.path[-1] if verdict.path else -1

    def checked(c: int) -> Checked:
        return Checked(tree.parents[c] + 1, tree.tokens[c], tree.q[c], verdict.uniforms.get(c),
                       tree.depth(c), c >= tree.chain)

    return Outcome(
        stood=[checked(c) for c in verdict.path],
        refused=[checked(c) for c in range(len(tree)) if c not in on_path],
        next_row=last + 1, next_token=verdict.next_token,
        kind=TokenKind.CORRECTED if tree.children(last) else TokenKind.BONUS,
        chain_accepted=verdict.chain_accepted,
        branch=tree.branch[last] if last >= tree.chain else None,
        branches_tested=tested_branches(tree, verdict), kept=list(verdict.path))
