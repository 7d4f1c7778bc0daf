"""Success rates that forget, tokens a second that forget, and the binning by confidence the
acceptance estimates share (the measurements behind the constants: docs/lab/)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from copy import copy

DECAY = 0.97
"""Forgetting factor per observation: an estimate follows the conversation (code, then prose)
within a few dozen rounds."""
PRIOR_ACCEPT, PRIOR_WEIGHT = 0.6, 2.0
EXPLORE_BONUS = 1.0
RECENT_ROUNDS = 4
"""Rounds `Recent` keeps: enough that one unlucky round does not decide, few enough that a
draft that stopped paying stops within a few rounds."""
CONF_BINS = (0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.995, 1.01)


class Rate:
    """A success rate with a prior and exponential forgetting."""

    __slots__ = ("hits", "n")

    def __init__(self, prior: float) -> None:
        self.hits, self.n = prior * PRIOR_WEIGHT, PRIOR_WEIGHT

    def add(self, ok: bool) -> None:
        self.hits = self.hits * DECAY + ok
        self.n = self.n * DECAY + 1.0

    @property
    def mean(self) -> float:
        return self.hits / self.n

    @property
    def optimistic(self) -> float:
        """The mean with `EXPLORE_BONUS` extra successes: high while little is known, so a
        length gets tried before it is written off; the bonus fades as evidence comes in."""
        return (self.hits + EXPLORE_BONUS) / (self.n + EXPLORE_BONUS)

    def shrink(self) -> None:
        """Keep the estimate, as evidence of only `PRIOR_WEIGHT` observations."""
        self.hits, self.n = self.mean * PRIOR_WEIGHT, PRIOR_WEIGHT


class Yield:
    """Tokens and seconds of a source's drafting rounds, with exponential forgetting: what
    drafting actually brought, whatever the cost model predicted."""

    __slots__ = ("tokens", "seconds", "n")

    def __init__(self) -> None:
        self.tokens = self.seconds = self.n = 0.0

    def add(self, tokens: int, seconds: float) -> None:
        self.tokens = self.tokens * DECAY + tokens
        self.seconds = self.seconds * DECAY + seconds
        self.n = self.n * DECAY + 1.0

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("inf")


class Recent:
    """Tokens and seconds of the last `RECENT_ROUNDS` rounds: what drafting brings now, for a
    decision that must follow the text within a few rounds."""

    __slots__ = ("rounds", "unjudged")

    def __init__(self) -> None:
        self.rounds: deque[tuple[int, float]] = deque(maxlen=RECENT_ROUNDS)
        self.unjudged = 0
        """Rounds added since a whole window of them was last judged (`judged`)."""

    def add(self, tokens: int, seconds: float) -> None:
        self.rounds.append((tokens, seconds))
        self.unjudged += 1

    @property
    def window_due(self) -> bool:
        """A window of `RECENT_ROUNDS` rounds came since the last was judged: windows that
        are counted do not overlap, while the rate still reads the last rounds."""
        return self.unjudged >= RECENT_ROUNDS

    def judged(self) -> None:
        self.unjudged = 0

    @property
    def n(self) -> int:
        return len(self.rounds)

    def all_stood(self, length: int) -> bool:
        """Every round kept brought a whole `length`-token draft and the token after it."""
        return all(tokens > length for tokens, _ in self.rounds)

    @property
    def rate(self) -> float:
        seconds = sum(s for _, s in self.rounds)
        return sum(t for t, _ in self.rounds) / seconds if seconds > 0 else float("inf")


def conf_bin(conf: float) -> int:
    return next(i for i, edge in enumerate(CONF_BINS) if conf < edge)


def conf_rates() -> list[Rate]:
    """One rate per confidence bin, each with the bin's upper confidence less 0.05 as prior."""
    return [Rate(min(edge, 1.0) - 0.05) for edge in CONF_BINS]


def monotone(bins: Sequence[Rate]) -> list[Rate]:
    """The bins' rates fitted to rise with confidence: each pooled with its neighbours wherever
    a lower bin shows the higher rate (pool adjacent violators, weighted by the observations),
    so refusals where the target was 80% sure speak for less sure text too (docs/lab/)."""
    blocks: list[tuple[Rate, int]] = []  # a pooled rate and how many bins it covers
    for rate in bins:
        pooled, count = copy(rate), 1
        while blocks and blocks[-1][0].mean > pooled.mean:
            below, covered = blocks.pop()
            pooled.hits += below.hits
            pooled.n += below.n
            count += covered
        blocks.append((pooled, count))
    return [pooled for pooled, count in blocks for _ in range(count)]


def expected_tokens(accept: list[float]) -> float:
    """Tokens a round yields when draft token i stands with probability accept[i] given the
    ones before it stood: 1 (correction or bonus) + sum over i of P(first i+1 all stand)."""
    total, alive = 1.0, 1.0
    for a in accept:
        alive *= a
        total += alive
    return total


def leviathan_tokens(alpha: float, gamma: float) -> float:
    """Expected tokens of a round that drafts `gamma` tokens, each standing with probability
    `alpha` independently: (1 - alpha^(gamma+1)) / (1 - alpha). Divided by the round's cost in
    target steps (gamma * c + verify cost) it is the paper's expected speedup."""
    return gamma + 1 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


def ema(table: dict, key: object, value: float, weight: float) -> None:
    """Move `table[key]` by `weight` towards `value` (set it where there is none)."""
    old = table.get(key)
    table[key] = value if old is None else old + weight * (value - old)
