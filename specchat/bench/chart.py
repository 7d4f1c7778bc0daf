"""The bench chart: speedup and acceptance against draft length k, one series per drafter.

Drawn twice from the same points: as an SVG file (no plotting library needed) and as bars in
the terminal. Adaptive arms have no single k, so they appear as a dashed level in the speedup
panel and as their own bars.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from rich.text import Text

from specchat.bench.report import ALL, Summary
from specchat.engine.drafters import NO_DRAFT

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b")
W, H, PAD = 420, 280, 48


@dataclass(frozen=True)
class Series:
    drafter: str
    points: list[tuple[int, float, float | None]]
    """(k, speedup, acceptance) of the fixed-k arms, by k."""
    adaptive: list[tuple[str, float, float | None]]
    """(arm, speedup, acceptance) of the arms whose policy chooses the length (adaptive,
    guarded)."""


def series(summaries: Sequence[Summary], category: str = ALL) -> list[Series]:
    out: dict[str, Series] = {}
    for s in summaries:
        if s.category != category or s.drafter == NO_DRAFT or s.speedup is None:
            continue
        line = out.setdefault(s.drafter, Series(s.drafter, [], []))
        if s.k is not None:
            line.points.append((s.k, s.speedup, s.acceptance))
        else:
            line.adaptive.append((s.arm, s.speedup, s.acceptance))
    for line in out.values():
        line.points.sort()
    return list(out.values())


def _panel(x0: int, title: str, all_series: Sequence[Series], value: int, y_max: float,
           ks: Sequence[int], ref: float | None, fmt: str) -> list[str]:
    """One panel: axes, a reference level, a polyline per drafter (value 1 = speedup,
    2 = acceptance), and dashed levels for the arms whose policy chooses the length."""
    left, right, top, bottom = x0 + PAD, x0 + W - 12, 34, H - 36
    k_lo, k_hi = (min(ks), max(ks)) if ks else (1, 2)
    span = max(1, k_hi - k_lo)

    def x(k: float) -> float:
        return left + (k - k_lo) / span * (right - left)

    def y(v: float) -> float:
        return bottom - v / y_max * (bottom - top)

    parts = [f'<text x="{x0 + W / 2}" y="20" text-anchor="middle" font-weight="bold">'
             f'{escape(title)}</text>',
             f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#444"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#444"/>',
             f'<text x="{(left + right) / 2}" y="{H - 8}" text-anchor="middle">draft length k'
             '</text>']
    for k in range(k_lo, k_hi + 1):
        parts.append(f'<text x="{x(k)}" y="{bottom + 16}" text-anchor="middle">{k}</text>')
    for i in range(5):
        v = y_max * i / 4
        parts.append(f'<text x="{left - 6}" y="{y(v) + 4}" text-anchor="end">{v:{fmt}}</text>')
        parts.append(f'<line x1="{left}" y1="{y(v)}" x2="{right}" y2="{y(v)}" stroke="#ddd"/>')
    if ref is not None:
        parts.append(f'<line x1="{left}" y1="{y(ref)}" x2="{right}" y2="{y(ref)}" '
                     'stroke="#888" stroke-dasharray="2 3"/>')
    for i, s in enumerate(all_series):
        colour = COLOURS[i % len(COLOURS)]
        pts = [(k, at) for k, *vals in s.points if (at := vals[value - 1]) is not None]
        if pts:
            path = " ".join(f"{x(k):.1f},{y(at):.1f}" for k, at in pts)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                         'stroke-width="2"/>')
            parts += [f'<circle cx="{x(k):.1f}" cy="{y(at):.1f}" r="3" fill="{colour}"/>'
                      for k, at in pts]
        for _arm, *levels in s.adaptive:
            level = levels[value - 1]
            if level is not None:
                parts.append(f'<line x1="{left}" y1="{y(level):.1f}" x2="{right}" y2="{y(level):.1f}" '
                             f'stroke="{colour}" stroke-dasharray="6 4"/>')
    return parts


def write_svg(path: Path, summaries: Sequence[Summary], title: str) -> None:
    all_series = series(summaries)
    ks = sorted({k for s in all_series for k, *_ in s.points})
    top_speedup = max([v for s in all_series for _, v, _ in s.points]
                      + [v for s in all_series for _, v, _ in s.adaptive] + [1.0])
    legend_h = 18 * sum(1 + len(s.adaptive) for s in all_series) + 10
    height = H + legend_h + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{height}" '
             'font-family="sans-serif" font-size="12">',
             f'<rect width="{2 * W}" height="{height}" fill="white"/>']
    parts += _panel(0, "speedup over target-only", all_series, 1, top_speedup * 1.1, ks, 1.0, ".1f")
    parts += _panel(W, "acceptance rate", all_series, 2, 1.0, ks, None, ".0%")
    y = H + 16
    parts.append(f'<text x="{PAD}" y="{y}">{escape(title)} · grey dots: 1.0x (target only)'
                 '</text>')
    for i, s in enumerate(all_series):
        colour = COLOURS[i % len(COLOURS)]
        y += 18
        parts.append(f'<line x1="{PAD}" y1="{y - 4}" x2="{PAD + 24}" y2="{y - 4}" '
                     f'stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<text x="{PAD + 30}" y="{y}">{escape(s.drafter)} (fixed k)</text>')
        for arm, speedup, _ in s.adaptive:
            y += 18
            parts.append(f'<line x1="{PAD}" y1="{y - 4}" x2="{PAD + 24}" y2="{y - 4}" '
                         f'stroke="{colour}" stroke-dasharray="6 4"/>')
            parts.append(f'<text x="{PAD + 30}" y="{y}">{escape(arm)}: {speedup:.2f}x</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def terminal_chart(summaries: Sequence[Summary], width: int = 30) -> Text:
    """Bars of speedup per drafter and k (a | marks 1.0x), with the acceptance beside them."""
    all_series = series(summaries)
    top = max([v for s in all_series for _, v, _ in s.points]
              + [v for s in all_series for _, v, _ in s.adaptive] + [1.0])
    one = round(width / top)
    text = Text("speedup over target-only (| = 1.0x), all categories\n", style="bold")
    for i, s in enumerate(all_series):
        colour = COLOURS[i % len(COLOURS)]
        text.append(f"{s.drafter}\n", style=f"bold {colour}")
        rows = [(f"k={k}", v, a) for k, v, a in s.points] + [
            (arm.removeprefix(s.drafter).strip(), v, a) for arm, v, a in s.adaptive]
        for label, v, a in rows:
            n = round(v / top * width)
            bar = "".join("|" if j == one - 1 and j >= n else ("█" if j < n else " ")
                          for j in range(max(n, one)))
            acc = "" if a is None else f"  accept {a:.0%}"
            text.append(f"  {label:<20.20} ")
            text.append(bar, style=colour)
            text.append(f" {v:.2f}x{acc}\n")
    return text
