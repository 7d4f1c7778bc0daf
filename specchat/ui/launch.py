"""What the app was started to do besides chatting: warm the models up, replay or race recorded
turns, start in step-through mode. The engine's settings are `Settings`, apart from these."""

from __future__ import annotations

from dataclasses import dataclass, field

from specchat.trace import Trace


@dataclass
class Launch:
    warm_up: bool = True
    """Run a short turn after loading, so the first reply is not timed while weights page in."""
    replay: Trace | None = None
    """Play this recorded turn instead of loading models."""
    replay_speed: float = 1.0
    race: list[Trace] = field(default_factory=list)
    """Play these recorded turns side by side on one clock instead of loading models."""
    step: bool = False
    """Start in step-through mode (F5)."""
