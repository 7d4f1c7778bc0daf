"""What a reply is writing where a round begins: code (inside a ``` block) or text.

A free signal of how often a draft's tokens will stand, which the target's running confidence
does not give. On the suite (docs/lab/2026-12-02-code-blocks-and-prose-what-the-target.md) the 0.5B draft's
tokens stood 0.90-0.98 of the time inside ``` blocks and 0.53-0.71 outside them, while the
target's running confidence could not tell the two apart: outside the blocks, at a running
confidence of 0.98 or more, 0.39 stood. The policy keeps what that confidence predicts, and
what drafting rounds brought, for each kind apart (`policy.reply.Where`), so refusals in prose do
not hold a code block back, nor code's successes draw catch-ups into prose.
"""

from __future__ import annotations

FENCE = "```"
CODE, TEXT = "code", "text"


def text_kind(reply_text: str) -> str:
    """CODE where the reply so far has opened a ``` block it has not closed, else TEXT."""
    return CODE if reply_text.count(FENCE) % 2 else TEXT
