"""Step-through mode: the last round laid out, for a room learning speculative decoding."""

from __future__ import annotations

from textual.binding import Binding
from textual.content import Content
from textual.widgets import Static

from specchat.engine.events import Event, RoundEvent, TokenEvent, TokenKind
from specchat.numbers import fmt
from specchat.ui.theming import token_style

EXPLAIN = (
    "The draft model proposed the tokens below; the target checked all of them in one forward "
    "pass. Greedy: a draft token stands while it is the target's own choice (its argmax). "
    "Sampling: it stands with probability min(1, p/q). At the first refusal the target's own "
    "token replaces it; if all stand, the target adds a bonus token for free."
)


TREE = ("A draft tree: beside tokens the draft was unsure of, its next-best tokens (↳) were "
        "verified in the same pass, each seeing only the tokens above it. The target follows "
        "its own choice down the tree; sampling tests siblings in turn, each against what the "
        "refused ones left of p.")


def tree_order(tokens: list[TokenEvent]) -> list[tuple[int, TokenEvent]]:
    """A round's tokens as its tree is laid out, with each one's depth: each draft position's
    chain token, then the branches beside it; the target's own token last."""
    drafts = [e for e in tokens if e.q is not None]
    first = min((e.position for e in drafts), default=0)
    drafts.sort(key=lambda e: (e.position, e.branch))
    return [(e.position - first, e) for e in drafts] + [
        (0, e) for e in tokens if e.q is None]


def describe_round(events: list[Event], baseline: float | None) -> Content:
    """One round as a small table (a tree, where the draft branched): token, q, p, verdict;
    then what it cost."""
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    summary = next((e for e in events if isinstance(e, RoundEvent)), None)
    tree = any(e.branch for e in tokens)
    parts = [Content.from_markup(f"[b]step-through[/b]  {EXPLAIN}"
                                 + (f" {TREE}" if tree else "") + "\n\n"),
             Content.from_markup("  token                q (draft)  p (target)  verdict\n")]
    for depth, e in tree_order(tokens) if tree else [(0, e) for e in tokens]:
        verdict = {
            TokenKind.ACCEPTED: "accepted: the target agrees",
            TokenKind.REJECTED: "rejected: the target disagrees",
            TokenKind.CORRECTED: "the target's own token at the first refusal",
            TokenKind.BONUS: "bonus: every draft token stood",
            TokenKind.TARGET: "target only (no draft this round)",
        }[e.kind]
        if e.branch:
            verdict = ("a branch: the target's choice here" if e.kind is TokenKind.ACCEPTED
                       else "a branch that lost")
        if e.u is not None and e.branch:  # p and q as shown are not what it was tested on
            verdict += f" (u {e.u:.2f}, against what the refused siblings left)"
        elif e.u is not None and e.p is not None and e.q:
            verdict += f" (u {e.u:.2f} vs p/q {min(1.0, e.p / e.q):.2f})"
        if e.kind is TokenKind.BONUS and tree:
            verdict = "bonus: the path reached a leaf"
        lead = ("  " * depth + ("↳ " if e.branch else "")) if tree else ""
        parts += [Content("  " + lead),
                  Content.styled(f"{e.text!r:<{20 - len(lead)}.{20 - len(lead)}}",
                                 token_style(e.kind)),
                  Content(f" {fmt(e.q, '.2f'):>9}  {fmt(e.p, '.2f'):>10}  {verdict}\n")]
    if summary is not None:
        cost = summary.draft_s + summary.verify_s
        alone = f"{summary.emitted / baseline * 1000:.0f} ms" if baseline else "– (not measured)"
        parts.append(Content(
            f"\nround {summary.round}: k={summary.k}, drafted {summary.drafted}, accepted "
            f"{summary.accepted}, {summary.emitted} token(s) for the reply. Cost: draft "
            f"{summary.draft_s * 1000:.0f} ms + verify {summary.verify_s * 1000:.0f} ms = "
            f"{cost * 1000:.0f} ms; target-only would take about {alone} for as many tokens."))
        if summary.branch_nodes:
            parts.append(Content(
                f" The pass verified {summary.drafted + summary.branch_nodes} draft tokens: "
                f"{summary.drafted} on the chain and {summary.branch_nodes} on branches."))
        if summary.source:
            parts.append(Content(f" Drafted by {summary.source}."))
        if summary.draft_pieces:
            parts.append(Content(
                f" In its own vocabulary the draft wrote {len(summary.draft_pieces)} token(s): "
                + " | ".join(repr(piece) for piece in summary.draft_pieces)
                + "; the target checked them as its own tokens above."))
        if summary.declined:
            parts.append(Content(" The policy drafted nothing: "
                                 + (summary.why or "no draft length was expected to pay this round")
                                 + "."))
        if summary.resumed:
            parts.append(Content(f" The policy drafts again after rounds it sat out: "
                                 f"{summary.resumed}."))
        if summary.catchup_tokens:
            parts.append(Content(
                f" Before its first token the draft read {summary.catchup_tokens} token(s) it "
                f"had not seen (the prompt, or rounds it sat out): that pass took "
                f"{summary.catchup_s * 1000:.0f} ms of the draft's time."))
        if summary.target_conf is not None:
            parts.append(Content(
                f" The target's running confidence (its top probability over the last tokens, "
                f"how predictable the text is here) was {summary.target_conf:.2f} as the round "
                f"began; the policy weighs it before the draft catches up on missed tokens."))
        if summary.expected_tokens is not None and summary.expected_s is not None:
            parts.append(Content(f" The cost model expected {summary.expected_tokens:.2f} "
                                 f"token(s) in {summary.expected_s * 1000:.0f} ms."))
    parts.append(Content.from_markup("\n[b]Space[/b] next round · [b]R[/b] run on · "
                                     "[b]Esc[/b] stop · [b]F7[/b] why, from this machine's costs"))
    return Content.assemble(*parts)


class StepPanel(Static, can_focus=True):
    """Shown in step-through mode; Space lets the next round run, R lets the turn run on."""

    BINDINGS = [Binding("space", "screen.next_round", "Next round"),
                Binding("r", "screen.run_on", "Run on")]
    DEFAULT_CSS = """
    StepPanel { height: auto; max-height: 50%; border: round $accent; padding: 0 1; display: none; }
    """

    def switch(self, stepping: bool) -> None:
        """Shown, saying what step-through does, or hidden."""
        self.display = stepping
        if stepping:
            self.update(Content.from_markup(f"[b]step-through[/b]  {EXPLAIN}\n\nSend a message;"
                                            " each round will wait for Space."))
