"""What a re-laid target gives up against its source: the KL divergence of next-token
distributions along the source's greedy replies over the prompt suite, how often the top token
differs, and which greedy replies change and at which token."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from specchat.bench.runner import Prompt
from specchat.engine.backend import Backend, user_turn
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import TurnEvent
from specchat.engine.loop import GenerationSettings, SpeculativeEngine


def greedy_reply(model: Backend, ids: list[int], tokens: int) -> list[int]:
    model.truncate(0)
    turn = [e for e in SpeculativeEngine(model, NoDrafter()).generate(
        ids, GenerationSettings(max_tokens=tokens)) if isinstance(e, TurnEvent)][0]
    model.truncate(0)
    return turn.token_ids


def _log_softmax(rows: np.ndarray) -> np.ndarray:
    rows = rows.astype(np.float64)
    top = rows.max(axis=1, keepdims=True)
    return rows - top - np.log(np.exp(rows - top).sum(axis=1, keepdims=True))


def next_token_logprobs(model: Backend, ids: list[int], reply: list[int]) -> np.ndarray:
    """Log-probabilities of the next token at every position of `reply` after `ids`."""
    model.truncate(0)
    rows = model.eval(ids + reply[:-1], len(ids) - 1)
    model.truncate(0)
    return _log_softmax(rows)


def kl_rows(p_log: np.ndarray, q_log: np.ndarray) -> np.ndarray:
    """KL(P || Q) in nats for each row of log-probabilities."""
    return (np.exp(p_log) * (p_log - q_log)).sum(axis=1)


def layout_quality(source: Backend, derived: Backend, prompts: Sequence[Prompt], tokens: int,
                   step: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """What the derived target gives up against its source over `prompts`: the KL divergence
    of the next-token distributions along the source's greedy reply, how often the top token
    differs there, and which greedy replies change and at which token."""
    kls: list[float] = []
    top_same = 0
    changed = []
    for p in prompts:
        ids = user_turn(source, p.text)
        a, b = greedy_reply(source, ids, tokens), greedy_reply(derived, ids, tokens)
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            changed.append({"prompt": f"{p.category}/{p.name}", "at": at})
        if a:
            p_log, q_log = next_token_logprobs(source, ids, a), next_token_logprobs(derived, ids, a)
            kls += kl_rows(p_log, q_log).tolist()
            top_same += int((p_log.argmax(axis=1) == q_log.argmax(axis=1)).sum())
        step(f"quality: {p.category}/{p.name}")
    return {"prompts": len(prompts), "tokens": tokens, "positions": len(kls),
            "kl_mean": round(float(np.mean(kls)), 5) if kls else None,
            "kl_p99": round(float(np.percentile(kls, 99)), 5) if kls else None,
            "top1_same": round(top_same / len(kls), 4) if kls else None,
            "replies_changed": len(changed), "changed": changed}


