"""The numbers beside the chat: the reply's rates, acceptance by position, the speedup."""

from __future__ import annotations

import os

from textual.content import Content

from specchat.cpu import busy_note
from specchat.engine.events import TurnEvent
from specchat.engine.stats import TurnStats
from specchat.numbers import fmt
from specchat.ui.widgets.line_static import LineStatic
from specchat.wording import about_the_same, fewer_threads, typed_ahead_words

SPARK = "▁▂▃▄▅▆▇█"


class StatsPanel(LineStatic):
    """Per-turn numbers, live while a turn streams, each labelled with what it measures (a
    redraw repaints the lines whose numbers changed)."""

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.baseline: float | None = None
        """The last turn's target-only rate at its depth: live speedups are taken against it."""
        self.baseline_label = "not measured yet"
        self.session_tokens = 0
        self.session_saved = 0

    def set_baseline(self, rate: float, how: str) -> None:
        self.baseline, self.baseline_label = rate, how

    def show(self, stats: TurnStats, draft: str, final: TurnEvent | None = None) -> None:
        rate = stats.tokens_per_second
        if final is not None:
            speedup = final.counts.speedup
        else:
            speedup = rate / self.baseline if rate and self.baseline else None
        passes = final.counts.target_passes if final else stats.rounds
        saved = max(0, stats.tokens - passes)
        bars = " ".join(f"{i + 1}:{SPARK[min(7, int(a * 8))]}{a:.0%}"
                        for i, a in enumerate(stats.by_position))
        spark = ""
        if stats.round_rates:
            top = max(stats.round_rates) or 1.0
            spark = "".join(SPARK[min(7, int(8 * r / top))] for r in stats.round_rates[-28:])
        interval = ""
        if final and final.counts.speedup_low is not None and final.counts.speedup_high is not None:
            interval = (f"\n  95%: {final.counts.speedup_low:.2f}-{final.counts.speedup_high:.2f}"
                        + ("  ≈ target-only" if about_the_same(final) else ""))
        lines = [
            f"[b]{'last turn' if final else 'this turn'}[/b]  draft: {draft}",
            f"tokens            {stats.tokens}",
            f"acceptance        {fmt(stats.acceptance, '.0%')}  ({stats.accepted}/{stats.drafted})",
            f"mean accepted len {fmt(stats.mean_accepted_length, '.2f')}",
            f"decode tok/s      {fmt(rate, '.1f')}",
            f"predicted tok/s   {fmt(stats.predicted_tokens_per_second, '.1f')}  (cost model)",
            f"time to 1st token {fmt(stats.t_first and stats.t_first * 1000, '.0f', ' ms')}"
            + (f"\n  {typed}" if final and (typed := typed_ahead_words(final.counts)) else ""),
            f"inter-token mean  {fmt(stats.itl_mean and stats.itl_mean * 1000, '.0f', ' ms')}",
            f"inter-token p95   {fmt(stats.itl_p95 and stats.itl_p95 * 1000, '.0f', ' ms')}",
            f"draft length k    {stats.k}  (this round)",
            f"undrafted rounds  {stats.declined}  (would not pay)"
            + (f"\n  drafting {stats.drafting_note}" if stats.drafting_note else ""),
            f"draft catch-up    {stats.catchup_tokens} tokens, {stats.catchup_s * 1000:.0f} ms",
            f"target passes     {passes}  (saved {saved})",
            f"speedup           {fmt(speedup, '.2f', 'x')}  (F7: why)" + interval,
            f"  vs target-only {fmt(self.baseline, '.1f', ' tok/s')}",
            f"  ({self.baseline_label})",
            f"tok/s per round   {spark}",
            f"accept by pos     {bars}",
        ]
        if stats.branch_nodes:
            lines.insert(4, f"tree: a round     {fmt(stats.verified_per_round, '.1f')} verified, "
                            f"{fmt(stats.mean_accepted_length, '.2f')} tokens gained")
        if final:
            self.session_tokens += final.counts.n_tokens
            self.session_saved += saved
            lines.append(f"stop              {final.stop_reason}")
            if final.diagnostics.others_cpu is not None:  # measured: say whether the machine was quiet
                busy = bool(busy_note(final.diagnostics.others_cpu))
                lines.append(f"other programs    {final.diagnostics.others_cpu:.0%} of the CPU"
                             + ("  [b](timings unreliable)[/b]" if busy else ""))
            if fewer_threads(final):
                lines.append(f"threads           {final.diagnostics.threads} of {os.cpu_count()} cores (the "
                             "rest were busy before it)")
        if final and final.diagnostics.server:
            lines += ["", "[b]the server's own[/b] (its timings)",
                      f"decode tok/s      {fmt(final.diagnostics.server.get('predicted_per_second'), '.1f')}",
                      f"prompt tok/s      {fmt(final.diagnostics.server.get('prompt_per_second'), '.1f')}",
                      f"drafted/accepted  {final.diagnostics.server.get('draft_n', 0)}/"
                      f"{final.diagnostics.server.get('draft_n_accepted', 0)}"]
        lines += ["", f"[b]session[/b]  tokens {self.session_tokens}, "
                      f"target passes saved {self.session_saved}"]
        self.update(Content.from_markup("\n".join(lines)), layout=False)  # fixed-size panel
