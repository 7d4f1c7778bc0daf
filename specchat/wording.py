"""What specchat says about a turn, in every front end's words: the placement of the models, a
context note, the speedup with its interval, why a turn was slower, the stats line. The sinks
that print it live in specchat.render; the TUI and the slides use the same sentences."""

from __future__ import annotations

from collections import Counter

from specchat.cpu import busy_note, default_threads
from specchat.engine.drafters import NO_DRAFT
from specchat.engine.events import ContextEvent, TokenEvent, TokenKind, TurnCounts, TurnEvent
from specchat.engine.loop import SpeculativeEngine
from specchat.engine.text_drafter import TextDrafter

LEGEND = "[green]accepted draft[/] [red strike]rejected draft[/] [yellow]target correction[/] " \
         "[cyan]bonus[/] target (✗: a rejected draft a server counted but did not show)"
UNSEEN_REJECTED = "✗"
"""How a rejected draft whose text is unknown is drawn: a llama-server reports them by count."""


def shown_text(event: TokenEvent) -> str:
    """The text a token is drawn with: its own, or the mark of a rejected draft known only by
    count."""
    if event.kind is TokenKind.REJECTED and not event.text:
        return UNSEEN_REJECTED
    return event.text


def placement(engine: SpeculativeEngine) -> str:
    """Where each model runs, in one line: `target X (here) · draft Y (RPC 10.0.0.2:50052)`,
    and whether it drafts trees where the settings ask for them (once: why not, if not)."""
    model = engine.drafter.model
    draft = f"draft {engine.drafter.name}" + (f" ({model.where})" if model else "")
    return f"target {engine.target.name} ({engine.target.where}) · {draft}" + trees_note(engine)


def trees_refused(engine: SpeculativeEngine) -> str | None:
    """Why this engine drafts chains where the settings ask for draft trees (None: they are
    drafted, or not asked for)."""
    if engine.draft_settings.tree is None:
        return None
    drafter = engine.drafter
    if not engine.target.can_tree:
        return f"{engine.target.name} verifies chains only where it runs, so the draft drafts chains"
    if isinstance(drafter, TextDrafter):
        return (f"{drafter.name} drafts chains (it drafts as text; trees branch where a draft "
                "of the target's vocabulary is unsure, or an earlier n-gram match went on "
                "otherwise)")
    return None


def trees_note(engine: SpeculativeEngine) -> str:
    """Where draft trees are asked for: that they are drafted, or why chains are."""
    if engine.draft_settings.tree is None:
        return ""
    why = trees_refused(engine)
    return f" · draft trees: {why}" if why else " · draft trees"


def context_note(event: ContextEvent) -> str:
    """What a context event did, in words (the TUI's transcript and the terminal say this)."""
    turns = f"{event.left_out} earlier turn{'s' * (event.left_out != 1)} left out of the " \
            "model's view (the history keeps them)"
    if not event.during_reply:
        return turns
    return (f"the reply reached the end of the context: {turns}; the target re-evaluated "
            f"{event.reeval_tokens} tokens in {event.reeval_s:.2f} s")


def about_the_same(turn: TurnEvent) -> bool:
    """Whether the turn's speedup interval holds 1.0: then it was not measurably faster or
    slower than the target alone."""
    return holds_one(turn.counts.speedup_low, turn.counts.speedup_high)


def holds_one(low: float | None, high: float | None) -> bool:
    return low is not None and high is not None and low <= 1.0 <= high


def speedup_text(speedup: float | None, low: float | None, high: float | None,
                 compact: bool = False) -> str:
    """A speedup with its 95% interval: `0.61x (95%: 0.55-0.68)`, or `about the same as
    target-only (0.97x, 95%: 0.88-1.05)` where the interval holds 1.0; `compact` for a table
    cell: `0.61x (0.55-0.68)`, `same: 0.97x (0.88-1.05)`."""
    if speedup is None:
        return "–"
    if low is None or high is None:
        return f"{speedup:.2f}x"
    if compact:
        return ("same: " if holds_one(low, high) else "") + f"{speedup:.2f}x ({low:.2f}-{high:.2f})"
    interval = f"95%: {low:.2f}-{high:.2f}"
    if holds_one(low, high):
        return f"about the same as target-only ({speedup:.2f}x, {interval})"
    return f"{speedup:.2f}x ({interval})"


def speedup_words(turn: TurnEvent) -> str:
    """The turn's speedup with its interval, in words (`speedup_text`)."""
    return speedup_text(turn.counts.speedup, turn.counts.speedup_low, turn.counts.speedup_high)


def fewer_threads(turn: TurnEvent) -> bool:
    """Whether the turn ran on fewer threads than physical cores: the others were busy when it
    started."""
    return turn.diagnostics.threads is not None and turn.diagnostics.threads < default_threads()


def typed_ahead_words(counts: TurnCounts) -> str:
    """What reading while the message was typed saved the first token ("" where it read
    nothing)."""
    unread = counts.ttft_unread_s
    if unread is None:
        return ""
    return (f"target alone up to {unread * 1000:.0f} ms: {counts.typed_ahead_tokens} tokens "
            f"read while typing")


def drafting_words(turn: TurnEvent) -> str:
    """Where the policy stopped drafting in the reply (and went on again), and why, for a
    status line; empty where it never stopped."""
    return f" · drafting {turn.diagnostics.drafting_note}" if turn.diagnostics.drafting_note else ""


def slower_why(turn: TurnEvent) -> str:
    """One line of why a reply was slower than the target alone, from what the turn measured:
    the draft's catch-ups on tokens it sat out, in target steps, where they took half of what
    the turn lost or more; else a round's cost in target steps against the tokens a round
    yielded; or that other programs took the CPU, when they did (then no number of it stands)."""
    c = turn.counts
    if note := busy_note(turn.diagnostics.others_cpu):
        return f" · {note}"
    if about_the_same(turn):
        return f" · {speedup_words(turn)}"
    step_rate = c.baseline_tokens_per_second
    if not c.speedup or c.speedup >= 1 or not step_rate or c.rounds < 2:
        return ""
    # each fits one status line beside "N tokens · stop: …" (the chat pane is 112 columns of 160)
    why = "specchat bench --server" if turn.diagnostics.server else "F7, specchat tune"
    lost_s = c.decode_s - (c.n_tokens - 1) / step_rate
    if c.catchup_s and c.catchup_s >= lost_s / 2:
        return (f" · {c.speedup:.2f}x: draft catch-up on {c.catchup_tokens} tokens took "
                f"{c.catchup_s * step_rate:.1f} steps (why: {why})")
    if not c.mean_accepted_length:
        return ""
    # speedup = tokens per round (after the first) over a round's cost in target steps
    round_steps = c.decode_s / (c.rounds - 1) * step_rate
    per_round = (c.n_tokens - 1) / (c.rounds - 1)
    return (f" · {c.speedup:.2f}x: {round_steps:.1f} steps a round for {per_round:.1f} "
            f"tokens (why: {why})")


def stats_line(turn: TurnEvent, k_used: Counter[int] | None = None) -> str:
    """One line of what the turn measured, each number labelled; `k_used` counts the rounds
    after the first by the draft length the policy allowed."""
    c = turn.counts
    parts = [f"{c.n_tokens} tokens", f"draft {turn.draft}"]
    if turn.draft != NO_DRAFT:
        used = ", ".join(f"{k}×{n}" for k, n in sorted((k_used or Counter()).items()))
        parts.append(f"{turn.policy} (k: rounds {used})" if used else turn.policy)
    if c.n_drafted:
        parts.append(f"accepted {c.n_accepted}/{c.n_drafted} "
                     f"({100 * (c.acceptance_rate or 0):.0f}%)")
        parts.append(f"mean accepted length {c.mean_accepted_length or 0:.2f}")
    if c.tokens_per_second is not None:
        parts.append(f"decode {c.tokens_per_second:.1f} tok/s")
    if c.speedup is not None and turn.draft != NO_DRAFT:
        parts.append(f"speedup {speedup_words(turn)} vs target-only "
                     f"{c.baseline_tokens_per_second or 0:.1f} tok/s ({c.baseline_source})")
    if c.predicted_tokens_per_second is not None:
        parts.append(f"predicted {c.predicted_tokens_per_second:.1f} tok/s")
    if c.declined_rounds:
        note = (f": drafting {turn.diagnostics.drafting_note}" if turn.diagnostics.drafting_note
                else " (drafting would not pay)")
        parts.append(f"{c.declined_rounds} rounds target-only{note}")
    if c.catchup_tokens:
        parts.append(f"draft catch-up {c.catchup_tokens} tokens in "
                     f"{c.catchup_s * 1000:.0f} ms (the prompt, rounds it sat out)")
    if c.context_shifts:
        parts.append(f"context shifts {c.context_shifts} ({c.shift_tokens} tokens "
                     f"re-evaluated in {c.shift_s:.2f} s, not in the decode rate)")
    saved = typed_ahead_words(c)
    parts.append(f"TTFT {c.ttft_s * 1000:.0f} ms" + (f" ({saved})" if saved else ""))
    if turn.diagnostics.server:
        parts.append(f"server's own: decode {turn.diagnostics.server.get('predicted_per_second', 0):.1f} "
                     f"tok/s, prompt {turn.diagnostics.server.get('prompt_per_second', 0):.1f} tok/s")
        parts.append(f"server steps {c.target_passes}")
    else:
        parts.append(f"target passes {c.target_passes}")
        if c.draft_passes:  # fewer than the tokens it drafted where its guesses stood
            parts.append(f"draft passes {c.draft_passes}")
    parts.append(f"stop {turn.stop_reason}")
    if fewer_threads(turn):
        parts.append(f"threads {turn.diagnostics.threads} (the other cores were busy before it)")
    if note := busy_note(turn.diagnostics.others_cpu):
        parts.append(note.upper()[:1] + note[1:])
    return " · ".join(parts)
