"""What of a conversation the model sees once the whole of it no longer fits the context.

The policies are LM Studio's, by turn (a user message and the reply to it): `rolling` leaves the
oldest turns out, `truncate-middle` the ones after the first (where a task is often set) and the
first one last, `stop` none (the turn is refused, a reply stops at the end of the context). The
system message, the new message and the reply so far are always kept; the history keeps every
turn, this only decides what is rendered into the prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specchat.engine.types import FittedPrompt
from specchat.errors import ContextOverflowError

POLICIES = ("rolling", "truncate-middle", "stop")

Message = tuple[str, str]
Render = Callable[[Sequence[Message]], list[int]]
"""Messages -> the prompt's token ids (the target's chat template, then its tokenizer)."""


def turns_of(messages: Sequence[Message]) -> list[list[Message]]:
    """The conversation cut into turns: each user message with what follows it up to the next
    one (a history may hold a reply without its question, or a question without a reply)."""
    turns: list[list[Message]] = []
    for message in messages:
        if message[0] == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


def drop_order(policy: str, n_turns: int) -> list[int]:
    """Which turns are left out first, in order."""
    if policy == "rolling":
        return list(range(n_turns))
    if policy == "truncate-middle":
        return list(range(1, n_turns)) + [0] if n_turns else []
    return []


def reserve(n_ctx: int, tokens_left: int) -> int:
    """FittedPrompt kept free for the reply when turns are left out: what is left of `max_tokens`, at
    most a quarter of the context (a long reply shifts again rather than dropping everything)."""
    return max(1, min(tokens_left, n_ctx // 4))


def fit(render: Render, system: str | None, history: Sequence[Message], user: str, *,
        n_ctx: int, policy: str, tokens_left: int, reply: Sequence[int] = (),
        at_least: int = 0) -> FittedPrompt | None:
    """The prompt with the fewest turns left out (at least `at_least`) that leaves `reserve`
    tokens free after `reply` (`stop`: one token, nothing left out); failing that, the one with
    the most left out that still leaves a token free. None when nothing the policy may leave
    out makes the reply fit."""
    turns = turns_of(history)
    order = drop_order(policy, len(turns))
    head = [("system", system)] if system else []
    free = 1 if policy == "stop" else reserve(n_ctx, tokens_left)
    last: FittedPrompt | None = None
    for n in range(at_least, len(order) + 1):
        out = set(order[:n])
        kept = [m for i, turn in enumerate(turns) if i not in out for m in turn]
        ids = render(head + kept + [("user", user)])
        used = len(ids) + len(reply)
        if used + free <= n_ctx:
            return FittedPrompt(ids, n)
        if used < n_ctx:
            last = FittedPrompt(ids, n)
    return last


def first_prompt(render: Render, system: str | None, history: Sequence[Message], user: str, *,
                 n_ctx: int, policy: str, max_tokens: int) -> FittedPrompt:
    """The prompt a turn starts from; raises ContextOverflowError, saying what to do, when even
    the policy's shortest prompt leaves no room for a reply."""
    fitted = fit(render, system, history, user, n_ctx=n_ctx, policy=policy, tokens_left=max_tokens)
    if fitted is not None:
        return fitted
    head = [("system", system)] if system else []
    alone = len(render(head + [("user", user)]))
    if alone >= n_ctx:
        raise ContextOverflowError(
            f"this message and the system message take {alone} tokens; the context holds "
            f"{n_ctx}: shorten it or raise --ctx")
    n = len(render(head + list(history) + [("user", user)]))
    raise ContextOverflowError(
        f"the conversation has {n} tokens; the context holds {n_ctx}: start a new chat, raise "
        "--ctx, or use --context-policy rolling")
