"""The few number helpers every consumer of the event stream shares: one way to show a value
that may be missing, one percentile, one mean."""

from __future__ import annotations

from collections.abc import Sequence

MISSING = "–"


def fmt(value: float | None, format_spec: str, suffix: str = "", scale: float = 1.0) -> str:
    """`value * scale` formatted with `format_spec` and `suffix`, or a dash when there is none."""
    return MISSING if value is None else f"{value * scale:{format_spec}}{suffix}"


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank q-quantile (0 <= q <= 1); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None
