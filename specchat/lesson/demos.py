"""The lesson's demonstrations: each reads what it needs from a Recordings (live models, a
room's servers, or the shipped traces) and lays it out as a Rich renderable, with the line
that says where its figures come from. Colours of verdicts come from the caller (the theme on
screen, or the slides' theme), so the lesson knows nothing of the UI."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from rich.console import Group, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from specchat.costs import break_even
from specchat.engine.events import Event, RoundEvent, TokenEvent, TokenKind, TurnEvent
from specchat.engine.verify import verify_sampling
from specchat.errors import SpecchatError
from specchat.lesson import figures
from specchat.lesson.figures import Acceptance, Check, Measured
from specchat.lesson.recordings import Recording, Recordings
from specchat.numbers import fmt, mean, percentile

Styles = dict[TokenKind, Style]
SAMPLES = 4000
"""Draws of each side of the sampling step's histogram."""


@dataclass(frozen=True)
class Demo:
    body: RenderableType
    sources: tuple[str, ...]
    """Where the figures come from, one line each."""
    checks: tuple[Check, ...] = ()
    """Each figure it predicts beside the one it measured."""
    uses: frozenset[tuple[str, ...]] = frozenset()
    """The recordings it was made from (`Recordings.take_reads`): running it again makes
    these again, and every step made from one of them."""


def _rounds(events: list[Event]) -> list[tuple[RoundEvent, list[TokenEvent]]]:
    """Each round with its tokens, in order."""
    out, tokens = [], []
    for event in events:
        if isinstance(event, TokenEvent):
            tokens.append(event)
        elif isinstance(event, RoundEvent):
            out.append((event, tokens))
            tokens = []
    return out


def _featured(recs: Recordings) -> tuple[Recording, RoundEvent, list[TokenEvent]]:
    """The round the draft, verify and cache steps explain: the first whose draft partly
    stood (a refusal and a correction to see) on the code prompt, else on the prose prompt,
    else the code prompt's first round that drafted."""
    first = None
    for kind in ("code", "prose"):
        rec = recs.recording(kind, probabilities=True)
        drafted = [(r, t) for r, t in _rounds(rec.speculative) if r.drafted >= 2]
        for r, t in drafted:
            if 0 < r.accepted < r.drafted:
                return rec, r, t
        if first is None and drafted:
            first = (rec, *drafted[0])
    if first is None:
        raise SpecchatError("no round of these recordings drafted two tokens or more")
    return first


def _piece(text: str) -> str:
    return repr(text)[1:-1] or "·"


def _bar(value: float, width: int = 20) -> str:
    full = max(0, min(width, round(value * width)))
    return "█" * full + "·" * (width - full)


def _reply_so_far(events: list[Event], before: int, styles: Styles, chars: int = 160) -> Text:
    """The reply's text before position `before`, in its verdict colours, its end kept."""
    pieces = [(e.kind, e.text) for e in events if isinstance(e, TokenEvent)
              and e.kind is not TokenKind.REJECTED and e.position < before]
    text = Text()
    for kind, piece in pieces:
        text.append(piece, styles[kind])
    if len(text) > chars:
        text = text[len(text) - chars:]
        text = Text("…") + text
    return text


def _rate(turn: TurnEvent) -> str:
    return fmt(turn.counts.tokens_per_second, ".1f", " tok/s")


def target_step(recs: Recordings, styles: Styles) -> Demo:
    rec = recs.recording("code")
    plain = rec.turns[0]
    tps = plain.counts.tokens_per_second
    tokens = [e for e in rec.target_only if isinstance(e, TokenEvent)][:40]
    text = Text()
    for i, e in enumerate(tokens):
        text.append(e.text, Style(reverse=i % 2 == 1) + styles[TokenKind.TARGET])
    table = Table.grid(padding=(0, 2))
    table.add_row("target step", fmt(1 / tps if tps else None, ".1f", " ms", 1000))
    table.add_row("decode rate", _rate(plain))
    table.add_row("first token", fmt(plain.counts.ttft_s, ".2f", " s") +
                  f" (the prompt's {rec.prompt_tokens} tokens read in one pass)")
    return Demo(Group(Text(f"> {rec.prompt}", style="bold"),
                      Text("the reply, one token a step (every other one shaded):"), text,
                      Text(), table), (rec.source,))


def draft(recs: Recordings, styles: Styles) -> Demo:
    rec, rnd, tokens = _featured(recs)
    drafts = [t for t in tokens if t.kind in (TokenKind.ACCEPTED, TokenKind.REJECTED)]
    table = Table("#", "draft token", "q (the draft's confidence)", box=None)
    for i, t in enumerate(drafts, 1):
        table.add_row(str(i), _piece(t.text), f"{_bar(t.q or 0)} {fmt(t.q, '.2f')}")
    first = min(t.position for t in tokens)
    return Demo(Group(Text("the reply so far:"), _reply_so_far(rec.speculative, first, styles),
                      Text(), Text(f"round {rnd.round}: {rec.drafter} proposes {rnd.drafted} "
                                   f"tokens in {rnd.draft_s * 1000:.0f} ms", style="bold"),
                      table), (rec.source,))


def _verdict_table(tokens: list[TokenEvent], styles: Styles) -> Table:
    table = Table("token", "q (draft)", "p (target)", "verdict", box=None)
    refused = False
    for t in tokens:
        verdict = {TokenKind.ACCEPTED: "stands", TokenKind.REJECTED: "refused",
                   TokenKind.CORRECTED: "the target's correction",
                   TokenKind.BONUS: "bonus: the last row's token",
                   TokenKind.TARGET: "the target's token"}[t.kind]
        if t.kind is TokenKind.REJECTED:
            verdict = "dropped: it follows a refused token" if refused else verdict
            refused = True
        table.add_row(Text(_piece(t.text), styles[t.kind]), fmt(t.q, ".2f"), fmt(t.p, ".2f"),
                      Text(verdict, styles[t.kind]))
    return table


def verify(recs: Recordings, styles: Styles) -> Demo:
    rec, rnd, tokens = _featured(recs)
    parts: list[RenderableType] = [
        Text(f"round {rnd.round}: one verify pass over {rnd.drafted + 1} positions, "
             f"{rnd.verify_s * 1000:.0f} ms: {rnd.accepted} of {rnd.drafted} stand, "
             f"{rnd.emitted} tokens added", style="bold"), _verdict_table(tokens, styles)]
    full = [(r, t) for r, t in _rounds(rec.speculative)
            if r.drafted and r.accepted == r.drafted and r is not rnd]
    if full:
        r, t = full[0]
        parts += [Text(), Text(f"round {r.round}: every draft stands, and the last row gives "
                               f"a bonus token ({r.emitted} tokens for one pass)", style="bold"),
                  _verdict_table(t, styles)]
    return Demo(Group(*parts), (rec.source,))


def cache(recs: Recordings, styles: Styles) -> Demo:
    rec, rnd, tokens = _featured(recs)
    start = rec.prompt_tokens + min(t.position for t in tokens)
    drafts = [t for t in tokens if t.kind in (TokenKind.ACCEPTED, TokenKind.REJECTED)]
    fixed = [t for t in tokens if t.kind in (TokenKind.CORRECTED, TokenKind.BONUS)]

    def row(label: str, kept: list[TokenEvent], cut: list[TokenEvent]) -> Text:
        line = Text(f"{label:<22}")
        line.append(f"[0 … {start - 1}] ", "dim")
        for t in kept:
            line.append(f"[{_piece(t.text)}]", styles[t.kind])
        for t in cut:
            line.append(f"[{_piece(t.text)}]", styles[TokenKind.REJECTED])
        return line

    kept = [t for t in drafts if t.kind is TokenKind.ACCEPTED]
    cut = [t for t in drafts if t.kind is TokenKind.REJECTED]
    after = start + len(kept)
    lines = [
        Text(f"round {rnd.round}: the context is {start} tokens (prompt and reply so far)",
             style="bold"),
        row("target, verifying:", kept, cut),
        row("target, after:", kept, []),
        Text(f"{'':<22}{len(cut)} rows cut back (llama_memory_seq_rm from position {after}); "
             f"the cache holds {after} tokens"),
        Text(f"{'':<22}next to read: " + " ".join(f"[{_piece(t.text)}]" for t in fixed)
             + " (the round's own token, read as the next round's first row)"),
        row("draft, after:", kept, []),
        Text(f"{'':<22}the draft is cut back to the same {after} tokens; it reads the "
             "target's token before drafting again"),
    ]
    return Demo(Group(*lines), (rec.source,))


def _acceptance_table(accept: Acceptance, label: str) -> Table:
    table = Table("draft position", "stands, given the ones before (over rounds)",
                  "expected tokens a round, drafting this many", box=None, title=label,
                  title_justify="left")
    for i, (rate, tried) in enumerate(accept.rates):
        table.add_row(str(i + 1), f"{_bar(rate)} {rate:.0%} (of {tried})",
                      f"{accept.expected(i + 1):.2f}")
    return table


def acceptance(recs: Recordings, styles: Styles) -> Demo:
    parts: list[RenderableType] = []
    sources, checks = [], []
    for kind in ("code", "prose"):
        rec = recs.recording(kind)
        accept = figures.acceptance_of(rec.speculative)
        if accept is None:
            parts.append(Text(f"{kind}: no round drafted"))
            continue
        k = len(accept.rates)
        check = accept.check(kind)
        parts += [_acceptance_table(accept, f"{kind}: {rec.drafter}, k={k}"),
                  Text(f"  one rate for every position, a = {accept.pooled:.2f} (stood over "
                       f"tried): (1 - a^{k + 1}) / (1 - a) = {accept.closed_form(k):.2f} "
                       "tokens a round"),
                  Text(f"  measured: {accept.tokens_a_round.shown('.2f')} tokens a round over "
                       f"{accept.rounds} drafting rounds; the rates above give "
                       f"{accept.predicted:.2f} for those rounds (their draft lengths): "
                       + ("agree" if check.agrees else "DISAGREE")), Text()]
        checks.append(check)
        sources.append(rec.source)
    return Demo(Group(*parts), tuple(sources), tuple(checks))


def _race(recs: Recordings, kind: str, arm: str = "draft"
          ) -> tuple[Recording, Acceptance | None, Measured | None]:
    rec = recs.recording(kind, arm)
    return rec, figures.acceptance_of(rec.speculative), figures.race_speedup(rec)


def verify_curve(recs: Recordings, styles: Styles) -> Demo:
    curve = recs.curve()
    rec, accept, measured = _race(recs, "code")
    costs = figures.race_costs(curve, rec)
    gpu = figures.h200_costs(costs)
    timed = len(curve.verify_ms)
    table = Table("verify n tokens", "ms timed here", "target steps here", "an H200's steps",
                  box=None)
    for n in (1, 2, 3, 4, 8, 9):
        if n <= timed:
            table.add_row(str(n), f"{curve.verify_ms[n - 1]:.1f}", f"{costs.steps(n):.2f}",
                          f"{gpu.steps(n):.2f}")
    parts: list[RenderableType] = [table, Text(
        f"in the race of the next step (code), a target step took "
        f"{costs.verify[0] + costs.between:.1f} ms (its pass {costs.verify[0]:.1f} ms, and "
        f"{costs.between:.1f} ms of sampling and Python, which a round pays once too), and a "
        f"drafted token {costs.draft:.1f} ms = {costs.draft_steps:.2f} of a target step (a draft "
        f"pass timed alone: {curve.draft_ms:.1f} ms; in a round the draft also reads the last "
        "round's token). The speedups below are on those costs.")]
    checks = []
    if accept is not None:
        gains = Table("draft k", "expected tokens a round", "speedup here",
                      "on an H200's curve", "a free drafter here", box=None,
                      title=f"with code's acceptance ({fmt(rec.turns[1].counts.acceptance_rate, '.0%')} "
                            "of drafts stood)", title_justify="left")
        for k in range(1, figures.K_MAX + 1):
            guessed = accept.rate(k - 1)[1] or k + 1 > timed
            mark = " *" if guessed else ""
            gains.add_row(str(k), f"{accept.expected(k):.2f}{mark}",
                          f"{figures.gains(costs, accept, k):.2f}x{mark}",
                          f"{figures.gains(gpu, accept, k):.2f}x{mark}",
                          f"{figures.gains(costs.free_drafter(), accept, k):.2f}x{mark}")
        k = len(accept.rates)
        even = break_even(costs, k)
        parts += [Text(), gains, Text(
            f"* past the {len(accept.rates)} positions the reply drafted (at a = "
            f"{accept.pooled:.2f}) or the {timed} verify sizes timed: extrapolated"),
                  Text(f"break-even at k={k} here: "
                       + (f"{even:.0%} of drafts standing at every position" if even else
                          "none (even drafts that always stand lose)"))]
        if measured is not None:
            check = figures.Check(f"code ({rec.drafter}): speedup", figures.predicted_race(
                curve, rec, accept), measured, figures.left_out(curve, rec))
            parts.append(Text(f"the race in the next step measured {measured.shown('.2f', 'x')} "
                              f"at k={k}; for its rounds as they ran this curve predicts "
                              f"{check.predicted:.2f}x: " + ("agree" if check.agrees else
                                                            "DISAGREE")))
            checks.append(check)
    return Demo(Group(*parts), (curve.source, rec.source, figures.H200_SOURCE), tuple(checks))


def _race_table(recs: Recordings, rows: tuple[tuple[str, str], ...], styles: Styles
                ) -> tuple[Table, list[str], list[Check], list[str]]:
    """Each (kind, arm) raced: the measured speedup with its interval, the speedup the curve
    predicts for it, and a line on each figure a run this short cannot settle."""
    curve = recs.curve()
    table = Table("prompt", "target alone", "speculative", "speedup (95%)", "predicted",
                  "drafts standing", box=None)
    sources, checks, unsettled = [], [], []
    for kind, arm in rows:
        rec, accept, measured = _race(recs, kind, arm)
        plain, spec = rec.turns
        predicted = (figures.predicted_race(curve, rec, accept) if accept is not None
                     else None)
        shown = Text("-")
        if measured is not None:
            won = measured.value >= 1
            shown = Text(measured.shown(".2f", "x"),
                         styles[TokenKind.ACCEPTED if won else TokenKind.REJECTED])
            if not measured.settled():
                unsettled.append(f"{kind}: this run does not settle whether it wins "
                                 "(its interval holds 1.00x): a longer run (--tokens) would")
            if predicted is not None:
                checks.append(figures.Check(f"{kind} ({rec.drafter}): speedup", predicted,
                                            measured, figures.left_out(curve, rec)))
        table.add_row(f"{kind} ({rec.drafter})", _rate(plain), _rate(spec), shown,
                      fmt(predicted, ".2f", "x"), fmt(spec.counts.acceptance_rate, ".0%"))
        sources.append(rec.source)
    return table, sources, checks, unsettled


def prose_vs_code(recs: Recordings, styles: Styles) -> Demo:
    rows = (("code", "draft"), ("prose", "draft"), ("edit", "ngram"))
    table, sources, checks, unsettled = _race_table(recs, rows, styles)
    lines = [Text(f"{c.figure.split(':')[0]} {'wins' if c.measured.value >= 1 else 'loses'}: "
                  f"{c.measured.value:.2f}x, where the previous step's costs predict "
                  f"{c.predicted:.2f}x" + _parting(c)) for c in checks]
    return Demo(Group(Text("decode rates, each reply generated alone (speedup: the two rates' "
                           "ratio; predicted: the previous step's costs at the reply's own "
                           "acceptance)"), table, Text(), *lines, _why(recs),
                      *[Text(u, style="italic") for u in unsettled]),
                tuple(dict.fromkeys(sources)), tuple(checks))


def _parting(check: Check) -> str:
    """What a slide adds where a prediction falls outside its measurement's interval."""
    if check.agrees:
        return ""
    return f": OUTSIDE its interval ({check.left_out or 'a cost the prediction leaves out'})"


def _why(recs: Recordings) -> Text:
    """Why a model draft wins or loses here, from the previous step's costs."""
    curve = recs.curve()
    rec, accept, _ = _race(recs, "code")
    costs = figures.race_costs(curve, rec)
    k = len(accept.rates) if accept else 3
    even = break_even(costs, k)
    verdict = (f"at k={k} its drafts must stand {even:.0%} of the time (at every position) to "
               "break even" if even else
               f"at k={k} it loses even where every draft stands: the round costs more than "
               f"the {k + 1} tokens it can give")
    return Text(f"why, from the previous step's costs: a drafted token costs "
                f"{costs.draft_steps:.2f} of a target step and a verify of {k + 1} rows "
                f"{costs.steps(k + 1):.2f} steps, so {verdict}; n-gram drafts cost nothing to "
                "make, only their rows in the verify")


def ngram(recs: Recordings, styles: Styles) -> Demo:
    table, sources, checks, unsettled = _race_table(recs, (("edit", "ngram"),), styles)
    rec = recs.recording("edit", "ngram")
    reply = _reply_so_far(rec.speculative, 10**9, styles, chars=400)
    return Demo(Group(table, *[Text(u, style="italic") for u in unsettled], Text(),
                      Text("the reply, drafts that stood in their colour:"), reply),
                tuple(sources), tuple(checks))


def draft_choice(recs: Recordings, styles: Styles) -> Demo:
    table = Table("draft", "drafts standing", "draft ms a token", "decode rate",
                  "speedup (same target alone, 95%)", box=None)
    sources = []
    for arm in ("draft", "other"):
        rec, _, measured = _race(recs, "code", arm)
        table.add_row(rec.drafter, fmt(rec.turns[1].counts.acceptance_rate, ".0%"),
                      fmt(figures.draft_ms_of(rec), ".1f"), _rate(rec.turns[1]),
                      measured.shown(".2f", "x") if measured else "-")
        sources.append(rec.source)
    parts: list[RenderableType] = [Text("the code prompt, each draft against the target alone"),
                                   table]
    if len({s.startswith("shipped") for s in sources}) > 1:
        parts.append(Text("one row is a shipped trace, recorded on another machine and day: its "
                          "rates do not compare with the row made here, only its speedup and "
                          "acceptance do (each against its own target alone)", style="italic"))
    return Demo(Group(*parts), tuple(sources))


def chi_square(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Pearson's statistic of counts against probabilities (cells expected under 5 merged into
    one), and its degrees of freedom."""
    expected = probs * counts.sum()
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    return float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum()), int(keep.sum()) - 1


FALSE_ALARM = 0.001
"""How often draws that do follow p cross the sampling demonstration's line: its verdict calls
a correct rule wrong one time in a thousand."""


def chi_square_line(df: int) -> float:
    """The statistic a fair draw exceeds with probability FALSE_ALARM (Wilson-Hilferty)."""
    z = 3.090  # the standard normal's 99.9th percentile
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3 if df > 0 else 0.0


def speculative_samples(p: np.ndarray, q: np.ndarray, n: int, rng: np.random.Generator
                        ) -> tuple[np.ndarray, list[tuple[int, float, bool]]]:
    """n tokens drawn the speculative way: a draft token from q, tested by the engine's own
    p/q rule; the first few draws' (token, u, stood)."""
    out = np.empty(n, dtype=int)
    shown = []
    for i in range(n):
        x = int(rng.choice(q.size, p=q))
        verdict = verify_sampling([x], [q], [p, p], rng)
        stood = verdict.n_accepted == 1
        out[i] = x if stood else verdict.next_token
        if i < 8:
            shown.append((x, verdict.uniforms[0], stood))
    return out, shown


def sampling(recs: Recordings, styles: Styles,
             rng: np.random.Generator | None = None) -> Demo:
    rows = recs.rows()
    rng = rng or np.random.default_rng()
    p = np.array(rows.p) / sum(rows.p)
    q = np.array(rows.q) / sum(rows.q)
    direct = np.bincount(rng.choice(p.size, size=SAMPLES, p=p), minlength=p.size)
    spec, shown = speculative_samples(p, q, SAMPLES, rng)
    drawn = np.bincount(spec, minlength=p.size)
    table = Table("token", "p", "q", f"target alone ({SAMPLES})", f"speculative ({SAMPLES})",
                  box=None)
    for i, label in enumerate(rows.labels):
        table.add_row(label, f"{p[i]:.3f}", f"{q[i]:.3f}",
                      f"{_bar(direct[i] / SAMPLES, 12)} {direct[i] / SAMPLES:.3f}",
                      f"{_bar(drawn[i] / SAMPLES, 12)} {drawn[i] / SAMPLES:.3f}")
    stat, df = chi_square(drawn, p)
    tests = Text("first draws: " + "; ".join(
        f"{rows.labels[x]} u={u:.2f} p/q={p[x] / q[x]:.2f} {'stands' if ok else 'refused'}"
        for x, u, ok in shown))
    verdict = "consistent with p" if stat < chi_square_line(df) else "NOT consistent with p"
    return Demo(Group(Text(f"the next token after …{rows.context}" if rows.context else
                           "the reply's first token", style="bold"), table, Text(), tests,
                      Text(f"speculative draws against p: chi-square {stat:.1f} on {df} degrees "
                           f"of freedom (the {FALSE_ALARM:.1%} line {chi_square_line(df):.1f}: "
                           f"draws that follow p cross it one time in "
                           f"{round(1 / FALSE_ALARM):,}): {verdict}")),
                (rows.source, f"the {2 * SAMPLES} draws: made now, with specchat's own p/q rule"))


def other_vocab(recs: Recordings, styles: Styles) -> Demo:
    rec = recs.recording("code", "other", probabilities=True)
    table = Table("the draft's own tokens", "as the target's tokens", box=None)
    shown = 0
    for rnd, tokens in _rounds(rec.speculative):
        if rnd.draft_pieces and shown < 5:
            verdicts = Text(" ").join(Text(f"[{_piece(t.text)}]", styles[t.kind])
                                      for t in tokens)
            table.add_row(" ".join(f"[{_piece(x)}]" for x in rnd.draft_pieces), verdicts)
            shown += 1
    note = ("" if shown else "this recording's draft shares the target's vocabulary: "
                             "no text-level rounds")
    return Demo(Group(Text(f"{rec.drafter} drafting for the target", style="bold"), table,
                      Text(note)), (rec.source,))


def gaps_s(events: list[Event]) -> list[float]:
    """The time between each token appearing and the one before it (a round's tokens appear
    together), after the first token."""
    rounds = [r for r, _ in _rounds(events)]
    out = []
    for before, r in zip(rounds, rounds[1:], strict=False):
        if r.emitted:
            out += [r.t_s - before.t_s] + [0.0] * (r.emitted - 1)
    return out


def latency(recs: Recordings, styles: Styles) -> Demo:
    table = Table("prompt", "target alone: mean", "p95", "speculative: mean", "p95",
                  "longest pause", box=None)
    sources = []
    for kind in ("short", "prose", "code", "domain"):
        rec = recs.recording(kind)
        plain, spec = gaps_s(rec.target_only), gaps_s(rec.speculative)
        table.add_row(kind, fmt(mean(plain), ".0f", " ms", 1000),
                      fmt(percentile(plain, 0.95), ".0f", " ms", 1000),
                      fmt(mean(spec), ".0f", " ms", 1000),
                      fmt(percentile(spec, 0.95), ".0f", " ms", 1000),
                      fmt(max(spec, default=None), ".0f", " ms", 1000))
        sources.append(rec.source)
    return Demo(Group(Text("gaps between tokens as they appear (a round's tokens appear "
                           "together)"), table), tuple(dict.fromkeys(sources)))


DEMOS: dict[str, Callable[[Recordings, Styles], Demo]] = {
    f.__name__: f for f in (target_step, draft, verify, cache, acceptance, verify_curve,
                            prose_vs_code, ngram, draft_choice, sampling, other_vocab, latency)}
"""Each demonstration by the name a lesson file gives it."""


def run_demo(name: str, recs: Recordings, styles: Styles) -> Demo:
    recs.take_reads()
    demo = DEMOS[name](recs, styles)
    return replace(demo, uses=recs.take_reads())
