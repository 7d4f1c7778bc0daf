"""What the policy learned with a target, as plain data that outlives the process: how often
each draft source's tokens stood by place in a draft, by the draft's own confidence and by the
target's running confidence in each kind of text, how often a pass brought nothing, and how
long the last replies ran. Read back, it is where a process's first conversation starts: a
one-off `specchat ask` and the app's first reply begin with what earlier replies measured, not
with the priors (docs/lab/2026-12-07-what-the-policy-remembers.md)."""

from __future__ import annotations

import math
from typing import Any

from specchat.engine.policy.acceptance import Acceptance
from specchat.engine.policy.cost_model import CostModel
from specchat.engine.policy.rates import CONF_BINS, Rate
from specchat.engine.policy.reply import LENGTHS_KEPT, Where

FORMAT = 1
"""The layout `remembered` writes; `recall` takes only this one."""


def remembered(costs: CostModel) -> dict[str, Any]:
    """The acceptance estimates, by source, and the replies' lengths (the one just written
    among them: a reply's length joins them when the next begins), as JSON-ready data."""
    lengths = [n for n in (*costs.lengths.recent, costs.reply.target_conf_n) if n > 0]
    return {"format": FORMAT, "sources": _sources(costs.acceptance),
            "lengths": lengths[-LENGTHS_KEPT:]}


def _sources(acceptance: Acceptance) -> dict[str, Any]:
    sources: dict[str, dict[str, Any]] = {}

    def of(source: str) -> dict[str, Any]:
        return sources.setdefault(source, {})

    for source, rates in acceptance.by_position.items():
        of(source)["by_position"] = [_pair(r) for r in rates]
    for source, rates in acceptance.by_confidence.items():
        of(source)["by_confidence"] = [_pair(r) for r in rates]
    for (source, after_empty), rate in acceptance.empty.items():
        of(source).setdefault("empty", {})["after_empty" if after_empty else "after_draft"] = \
            _pair(rate)
    for where, rates in acceptance.by_target_conf.items():
        of(where.source).setdefault("by_target_conf", {})[where.kind] = [_pair(r) for r in rates]
    return sources


def recall(costs: CostModel, data: object) -> bool:
    """Start `costs` from `data` (as `remembered` wrote it), the draft's own rates shrunk to a
    prior as at a new conversation; False, and nothing changed, where `data` is not that
    (another format, a damaged file)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return False
    sources, lengths = data.get("sources"), data.get("lengths", [])
    if not isinstance(sources, dict) or not isinstance(lengths, list) or not all(
            isinstance(n, int) and n > 0 for n in lengths):
        return False
    try:
        learned = Acceptance()
        for source, known in sources.items():
            if "by_position" in known:
                learned.by_position[source] = _rates(known["by_position"])
            if "by_confidence" in known:
                learned.by_confidence[source] = _rates(known["by_confidence"], len(CONF_BINS))
            for name, pair in known.get("empty", {}).items():
                if name not in ("after_empty", "after_draft"):
                    raise ValueError(name)
                learned.empty[(source, name == "after_empty")] = _rate(pair)
            for kind, rates in known.get("by_target_conf", {}).items():
                learned.by_target_conf[Where(source, kind)] = _rates(rates, len(CONF_BINS))
    except (AttributeError, KeyError, TypeError, ValueError):
        return False
    learned.new_conversation()
    for n in lengths:
        costs.lengths.add(n)
    acceptance = costs.acceptance
    acceptance.by_position.update(learned.by_position)
    acceptance.by_confidence.update(learned.by_confidence)
    acceptance.empty.update(learned.empty)
    acceptance.by_target_conf.update(learned.by_target_conf)
    return True


def _pair(rate: Rate) -> list[float]:
    return [rate.hits, rate.n]


def _rate(pair: object) -> Rate:
    if not isinstance(pair, list) or len(pair) != 2:
        raise ValueError("a rate is [hits, n]")
    hits, n = (float(x) for x in pair)
    if not (math.isfinite(n) and 0 <= hits <= n and n > 0):
        raise ValueError(f"{hits} of {n}")
    rate = Rate(0.0)
    rate.hits, rate.n = hits, n
    return rate


def _rates(pairs: object, length: int | None = None) -> list[Rate]:
    if not isinstance(pairs, list) or length not in (None, len(pairs)):
        raise ValueError(f"{length} rates, one a confidence bin")
    return [_rate(pair) for pair in pairs]
