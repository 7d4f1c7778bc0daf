"""The draft-length policies a user chooses between, by name."""

from __future__ import annotations

from enum import StrEnum


class PolicyKind(StrEnum):
    FIXED = "fixed"
    """Draft k tokens a round (llama.cpp's rule)."""
    GUARDED = "guarded"
    """llama.cpp's rule while it beats plain steps on this machine; shorter or none otherwise."""
    ADAPTIVE = "adaptive"
    """Choose up to k a round from this machine's measured costs."""
