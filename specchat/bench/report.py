"""From runs to the numbers a user compares: per category and arm, and over the whole suite.

Rates are totals (tokens over seconds), not means of per-run rates, so long replies weigh what
they cost. Speedup divides by the target-only arm of the same category in the same run. The
predicted speedup is the expected-accepted-length model of Leviathan et al. (2023), fed with
this run's measured acceptance, draft length, draft cost and verify cost, so the gap between
predicted and measured shows where the model's assumptions (independent acceptances, constant
costs) do not hold.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from specchat.bench.runner import SERVER, Run
from specchat.engine.drafters import NO_DRAFT
from specchat.engine.policy.rates import leviathan_tokens
from specchat.engine.stats import paired_speedup_interval
from specchat.numbers import fmt, mean, percentile
from specchat.wording import speedup_text

ALL = "all"


@dataclass
class Summary:
    category: str
    arm: str
    drafter: str
    k: int | None
    runs: int
    tokens: int
    tokens_per_second: float | None
    """Decode rate: tokens after the first over the time after the first token, totalled."""
    speedup: float | None
    """tokens_per_second over the target-only arm's, same category, same run."""
    predicted_speedup: float | None
    """Leviathan et al.'s formula with this run's alpha, gamma, draft and verify costs."""
    policy_predicted_tps: float | None
    """The engine's own cost model: expected tokens over expected seconds, round by round."""
    acceptance: float | None
    mean_accepted_length: float | None
    draft_len: float | None
    """gamma: tokens drafted per drafting round."""
    draft_cost: float | None
    """c: seconds per drafted token over the target-only seconds per token."""
    verify_cost: float | None
    """Verify seconds of a drafting round over the target-only seconds per token."""
    latency_mean_s: float
    latency_p50_s: float | None
    latency_p95_s: float | None
    ttft_mean_s: float
    itl_mean_s: float | None
    itl_p95_s: float | None
    itl_sd_across_prompts_s: float | None
    """Spread of the per-prompt mean inter-token latency."""
    declined_rounds: int
    catchup_share: float | None = None
    """Of the arm's decode seconds, the share its draft model spent catching up on the prompt
    and on rounds it sat out (None where nothing was decoded)."""
    reported_speedup: float | None = None
    """Median over runs of the speedup each turn reported (target-only steps timed after it)."""
    reported_over_measured: float | None = None
    """Median over runs of that reported speedup over the back-to-back one (this run's rate
    over the target-only run of the same prompt and repeat): 1.0 when the in-turn baseline is
    right."""
    nodes_per_round: float | None = None
    """Draft tokens verified per drafting round: the chain's and a tree's branches'."""
    speedup_low: float | None = None
    speedup_high: float | None = None
    """The speedup's 95% interval: runs and their target-only runs (same prompt and repeat)
    resampled together."""


def summarize(runs: Sequence[Run], yardstick: str | None = None) -> list[Summary]:
    """One summary per (category, arm), then per arm over all categories; speedups against the
    target-only arm, or against the arm labelled `yardstick` (another target alone:
    `bench --baseline-target`)."""
    categories = list(dict.fromkeys(r.category for r in runs))
    arms = list(dict.fromkeys(r.arm for r in runs))
    out = []
    for category in [*categories, ALL]:
        chosen = [r for r in runs if category in (ALL, r.category)]
        base = [r for r in chosen if (r.arm == yardstick if yardstick else r.drafter == NO_DRAFT)]
        step_s = _step_s(base)
        for arm in arms:
            mine = [r for r in chosen if r.arm == arm]
            if mine:
                out.append(_with_paired(_summary(category, arm, mine, step_s), mine, base))
    return out


def _with_paired(s: Summary, runs: Sequence[Run], base: Sequence[Run]) -> Summary:
    """The numbers that pair each run with the target-only run of its prompt and repeat: the
    in-turn speedup against the back-to-back one, and the speedup's interval."""
    plain = {(r.prompt, r.repeat): r for r in base}
    reported = [r.reported_speedup for r in runs if r.reported_speedup]
    ratios = [r.reported_speedup / (r.tokens_per_second / b.tokens_per_second) for r in runs
              if r.reported_speedup and r.tokens_per_second
              and (b := plain.get((r.prompt, r.repeat))) and b.tokens_per_second]
    s.reported_speedup = statistics.median(reported) if reported else None
    s.reported_over_measured = statistics.median(ratios) if ratios else None
    pairs = [(r, plain[(r.prompt, r.repeat)]) for r in runs if (r.prompt, r.repeat) in plain]
    if s.arm not in {b.arm for b in base}:
        s.speedup_low, s.speedup_high = paired_speedup_interval(
            [(max(0, r.tokens - 1), r.decode_s) for r, _ in pairs],
            [(max(0, b.tokens - 1), b.decode_s) for _, b in pairs])
    return s


def _rate(runs: Sequence[Run]) -> float | None:
    tokens = sum(max(0, r.tokens - 1) for r in runs)
    seconds = sum(r.decode_s for r in runs)
    return tokens / seconds if seconds > 0 else None


def _catchup_share(runs: Sequence[Run]) -> float | None:
    seconds = sum(r.decode_s for r in runs)
    return sum(r.catchup_s for r in runs) / seconds if seconds > 0 else None


def _step_s(base: Sequence[Run]) -> float | None:
    rate = _rate(base)
    return 1 / rate if rate else None


def _summary(category: str, arm: str, runs: Sequence[Run], step_s: float | None) -> Summary:
    rate = _rate(runs)
    drafted, accepted = sum(r.drafted for r in runs), sum(r.accepted for r in runs)
    spec_rounds = sum(r.spec_rounds for r in runs)
    plain_rounds = sum(r.plain_rounds for r in runs)
    alpha = accepted / drafted if drafted else None
    gamma = drafted / spec_rounds if spec_rounds else None
    c = v = predicted = None
    local = runs[0].drafter != SERVER  # a server's draft and verify costs are not timed here
    if local and step_s and spec_rounds and alpha is not None and gamma is not None:
        c = sum(r.draft_s for r in runs) / drafted / step_s
        v = sum(r.spec_verify_s for r in runs) / spec_rounds / step_s
        v_plain = (sum(r.plain_verify_s for r in runs) / plain_rounds / step_s
                   if plain_rounds else 1.0)
        # drafting rounds as the formula expects them, target-only rounds one token each
        predicted = ((spec_rounds * leviathan_tokens(alpha, gamma) + plain_rounds)
                     / (spec_rounds * (gamma * c + v) + plain_rounds * v_plain))
    expected = [(r.predicted_tokens_per_second, r.decode_s) for r in runs
                if r.predicted_tokens_per_second]
    # the policy's rate over the same seconds: tokens it expected in the time the runs took
    policy = (sum(p * s for p, s in expected) / sum(s for _, s in expected)
              if expected and sum(s for _, s in expected) > 0 else None)
    per_prompt: dict[str, list[float]] = {}
    for r in runs:
        if r.itl_mean is not None:
            per_prompt.setdefault(r.prompt, []).append(r.itl_mean)
    prompt_means = [statistics.fmean(v) for v in per_prompt.values()]
    gaps = [g for r in runs for g in r.gaps]
    latencies = [r.wall_s for r in runs]
    return Summary(
        category=category, arm=arm, drafter=runs[0].drafter, k=runs[0].k, runs=len(runs),
        tokens=sum(r.tokens for r in runs), tokens_per_second=rate,
        speedup=rate * step_s if rate and step_s else None, predicted_speedup=predicted,
        policy_predicted_tps=policy, acceptance=alpha,
        mean_accepted_length=(sum(r.spec_emitted for r in runs) / spec_rounds
                              if spec_rounds else None),
        nodes_per_round=((drafted + sum(r.branch_nodes for r in runs)) / spec_rounds
                         if spec_rounds else None),
        draft_len=gamma, draft_cost=c, verify_cost=v,
        latency_mean_s=statistics.fmean(latencies), latency_p50_s=percentile(latencies, 0.5),
        latency_p95_s=percentile(latencies, 0.95),
        ttft_mean_s=statistics.fmean(r.ttft_s for r in runs),
        itl_mean_s=mean(gaps), itl_p95_s=percentile(gaps, 0.95),
        itl_sd_across_prompts_s=statistics.pstdev(prompt_means) if len(prompt_means) > 1 else None,
        declined_rounds=sum(r.declined_rounds for r in runs),
        catchup_share=_catchup_share(runs),
    )


def write_json(path: Path, meta: dict[str, Any], runs: Sequence[Run],
               summaries: Sequence[Summary], against: Sequence[Summary] = ()) -> None:
    """`against`: the summaries against `bench --baseline-target`'s arm, where it ran."""
    path.write_text(json.dumps({"meta": meta, "runs": [asdict(r) for r in runs],
                                "summary": [asdict(s) for s in summaries],
                                "against_baseline_target": [asdict(s) for s in against]},
                               indent=1) + "\n")


def write_csv(path: Path, summaries: Sequence[Summary]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([f.name for f in fields(Summary)])
        for s in summaries:
            writer.writerow(["" if v is None else v for v in asdict(s).values()])


SPEED_COLUMNS = ("tok/s", "speedup\n(95% interval)", "reported\n(in turn)", "reported /\nback-to-back",
                 "predicted\n(Leviathan)", "policy\npredicted tok/s", "accept", "mean acc.\nlength",
                 "verified\n/round")
LATENCY_COLUMNS = ("latency ms\nmean", "p50", "p95", "TTFT ms\nmean", "ITL ms\nmean", "ITL p95",
                   "ITL sd across\nprompts")


def _speed_row(s: Summary) -> list[str]:
    return [fmt(s.tokens_per_second, ".2f"), speedup_text(s.speedup, s.speedup_low, s.speedup_high,
                                                          compact=True),
            fmt(s.reported_speedup, ".2f"), fmt(s.reported_over_measured, ".3f"),
            fmt(s.predicted_speedup, ".2f"), fmt(s.policy_predicted_tps, ".2f"),
            fmt(s.acceptance, ".0%"), fmt(s.mean_accepted_length, ".2f"),
            fmt(s.nodes_per_round, ".2f")]


def _latency_row(s: Summary) -> list[str]:
    return [fmt(s.latency_mean_s, ".0f", scale=1000), fmt(s.latency_p50_s, ".0f", scale=1000),
            fmt(s.latency_p95_s, ".0f", scale=1000), fmt(s.ttft_mean_s, ".0f", scale=1000),
            fmt(s.itl_mean_s, ".0f", scale=1000), fmt(s.itl_p95_s, ".0f", scale=1000),
            fmt(s.itl_sd_across_prompts_s, ".1f", scale=1000)]


def rich_tables(summaries: Sequence[Summary], title: str) -> list:
    """Two tables, each fits a terminal: rates and acceptance, then latencies."""
    from rich.table import Table

    tables = []
    for name, columns, row in ((f"{title}: rates", SPEED_COLUMNS, _speed_row),
                               (f"{title}: latency", LATENCY_COLUMNS, _latency_row)):
        table = Table(title=name, title_justify="left")
        table.add_column("category", overflow="fold")
        table.add_column("arm", overflow="fold")
        for column in columns:  # a narrow terminal folds a cell rather than cutting it to "…"
            table.add_column(column, justify="right", overflow="fold")
        last = None
        for s in summaries:
            if last is not None and s.category != last:
                table.add_section()
            last = s.category
            table.add_row(s.category, s.arm, *row(s))
        tables.append(table)
    return tables


def yardstick_table(summaries: Sequence[Summary], yardstick: str):
    """Each arm's rate and speedup against another target alone (`bench --baseline-target`)."""
    from rich.table import Table

    table = Table(title=f"speedup against {yardstick} (same prompts, same run)",
                  title_justify="left")
    for column in ("category", "arm", "tok/s", "speedup\n(95% interval)"):
        table.add_column(column, justify="left" if column in ("category", "arm") else "right",
                         overflow="fold")
    for s in summaries:
        if s.arm != yardstick:
            table.add_row(s.category, s.arm, fmt(s.tokens_per_second, ".2f"),
                          speedup_text(s.speedup, s.speedup_low, s.speedup_high, compact=True))
    return table


def markdown_table(summaries: Sequence[Summary]) -> str:
    """The per-category table for docs: rate, speedup (measured, predicted), acceptance."""
    lines = ["| category | arm | tok/s | speedup (95% interval) | reported in turn (median) | reported / "
             "back-to-back (median) | predicted (Leviathan) | policy predicted tok/s "
             "| acceptance | mean accepted length | TTFT ms | ITL ms mean / p95 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        lines.append(
            f"| {s.category} | {s.arm} | {fmt(s.tokens_per_second, '.2f')} | "
            f"{speedup_text(s.speedup, s.speedup_low, s.speedup_high, compact=True)} | "
            f"{fmt(s.reported_speedup, '.2f')} | "
            f"{fmt(s.reported_over_measured, '.3f')} | {fmt(s.predicted_speedup, '.2f')} | "
            f"{fmt(s.policy_predicted_tps, '.2f')} | {fmt(s.acceptance, '.0%')} | "
            f"{fmt(s.mean_accepted_length, '.2f')} | {fmt(s.ttft_mean_s, '.0f', scale=1000)} | "
            f"{fmt(s.itl_mean_s, '.0f', scale=1000)} / {fmt(s.itl_p95_s, '.0f', scale=1000)} |")
    return "\n".join(lines)
