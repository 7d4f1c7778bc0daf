"""`specchat bench` on the tiny models: the files it writes, and numbers that agree with the
events it consumed."""

from __future__ import annotations

import csv
import json
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.models import load
from support.processes import specchat

from specchat.bench.report import ALL, summarize
from specchat.bench.runner import Arm, Run, load_prompts, run_suite
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import RoundEvent
from specchat.engine.loop import DraftSettings
from specchat.engine.model_drafter import ModelDrafter
from specchat.engine.ngram_drafter import NgramDrafter
from specchat.engine.policy import PolicyKind, expected_tokens
from specchat.engine.policy.rates import leviathan_tokens
from specchat.engine.sampling import SamplingParams
from specchat.errors import SpecchatError


@given(alpha=st.floats(0.0, 1.0), gamma=st.integers(0, 10))
def test_leviathan_closed_form_equals_the_sum_over_positions(alpha, gamma):
    assert leviathan_tokens(alpha, gamma) == pytest.approx(expected_tokens([alpha] * gamma))


def test_runs_and_summaries_agree_with_the_events_they_consumed(tiny):
    target, draft = load(tiny.target), load(tiny.draft)
    drafters = {"none": NoDrafter(), "ngram": NgramDrafter(2),
                "tiny-draft": ModelDrafter(draft, SamplingParams(), np.random.default_rng(0))}
    arms = [Arm("none"), Arm("tiny-draft", DraftSettings(k=3)), Arm("ngram", DraftSettings(k=4)),
            Arm("tiny-draft", DraftSettings(k=6, policy_kind=PolicyKind.ADAPTIVE))]
    prompts = load_prompts(categories=["short", "edit"])
    seen: list[list] = []
    original = Run.from_events.__func__

    def recording(cls, events, **labels):
        events = list(events)
        seen.append(events)
        return original(cls, events, **labels)

    Run.from_events = classmethod(recording)
    try:
        runs = run_suite(target, drafters, arms, prompts, repeats=2, max_tokens=24)
    finally:
        Run.from_events = classmethod(original)
    assert len(runs) == len(seen) == 2 * len(prompts) * len(arms)
    for run, events in zip(runs, seen):
        turn, rounds = events[-1], [e for e in events if isinstance(e, RoundEvent)]
        assert run.tokens == turn.counts.n_tokens == sum(r.emitted for r in rounds)
        assert run.drafted == sum(r.drafted for r in rounds) == turn.counts.n_drafted
        assert run.accepted == sum(r.accepted for r in rounds) == turn.counts.n_accepted
        assert run.draft_s == pytest.approx(sum(r.draft_s for r in rounds if r.drafted))
        assert run.decode_s == pytest.approx(rounds[-1].t_s - rounds[0].t_s)
        assert run.ttft_s == pytest.approx(rounds[0].t_s)  # empty caches: the whole prompt
        assert run.catchup_s == pytest.approx(sum(r.catchup_s for r in rounds))
    by = {(s.category, s.arm): s for s in summarize(runs)}
    base = by[(ALL, "target only")]
    for arm in ("tiny-draft k=3", "ngram k=4", "tiny-draft adaptive k<=6"):
        s, mine = by[(ALL, arm)], [r for r in runs if r.arm == arm]
        rate = sum(r.tokens - 1 for r in mine) / sum(r.decode_s for r in mine)
        assert s.tokens_per_second == pytest.approx(rate)
        assert s.speedup == pytest.approx(rate / base.tokens_per_second)
        if s.acceptance is not None:
            assert s.acceptance == pytest.approx(sum(r.accepted for r in mine)
                                                 / sum(r.drafted for r in mine))
        assert s.latency_p50_s <= s.latency_p95_s
        assert s.catchup_share == pytest.approx(sum(r.catchup_s for r in mine)
                                                / sum(r.decode_s for r in mine))
        reported = [r.reported_speedup for r in mine]
        assert all(x is not None and x > 0 for x in reported)  # each turn timed its baseline
        assert s.reported_speedup == pytest.approx(statistics.median(reported))
        plain = {(r.prompt, r.repeat): r.tokens_per_second for r in runs if r.drafter == "none"}
        ratios = [r.reported_speedup / (r.tokens_per_second / plain[(r.prompt, r.repeat)])
                  for r in mine]
        assert s.reported_over_measured == pytest.approx(statistics.median(ratios))
        assert s.speedup_low is not None and s.speedup_high is not None  # 2 prompts x 2 repeats
        assert s.speedup_low <= s.speedup_high
    assert base.reported_speedup is None and base.speedup_low is None
    assert base.catchup_share == 0 < by[(ALL, "tiny-draft k=3")].catchup_share  # the prompt
    assert by[("edit", "ngram k=4")].runs == 2 * 2  # two edit prompts, two repeats
    target.close()
    draft.close()


def test_bench_writes_json_csv_and_the_chart(tiny, tmp_path):
    out = tmp_path / "out"
    proc = specchat("bench", "--target", str(tiny.target), "--drafters", f"{tiny.draft},ngram",
                    "--k", "1,2", "--adaptive", "--k-max", "4", "--categories", "short,edit",
                    "--max-tokens", "40", "--out", str(out), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((out / "bench.json").read_text())
    arms = ["target only", "tiny-draft k=1", "tiny-draft k=2", "tiny-draft adaptive k<=4",
            "ngram k=1", "ngram k=2", "ngram adaptive k<=4"]
    assert data["meta"]["arms"] == arms
    assert len(data["runs"]) == 4 * len(arms)  # two prompts in each of two categories
    assert {s["category"] for s in data["summary"]} == {"short", "edit", "all"}
    rows = list(csv.DictReader((out / "bench.csv").open()))
    assert len(rows) == 3 * len(arms) and {"speedup", "predicted_speedup", "itl_p95_s"} <= rows[0].keys()
    svg = ET.parse(out / "bench.svg").getroot()
    lines = svg.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 2 * 2  # speedup and acceptance for each drafter's fixed-k series
    assert "speedup over target-only" in proc.stdout and "tiny-draft adaptive k<=4" in proc.stdout
    assert "…" not in proc.stdout  # a pipe gets whole cells, not rich's 80 columns cut short


@pytest.mark.parametrize("path", sorted(Path(__file__).parents[2].glob("benchmarks/prompts/*.toml")),
                         ids=lambda path: path.name)
def test_the_prompt_files_the_guides_name_load(path):
    """`--prompts benchmarks/prompts/<file>` in the guides and lab entries loads, with prompts
    of distinct names in each category."""
    prompts = load_prompts(path)
    assert prompts and len({(p.category, p.name) for p in prompts}) == len(prompts)


def test_bad_prompt_files_and_categories_are_clear_errors(tmp_path):
    with pytest.raises(SpecchatError, match="prompts file not found"):
        load_prompts(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text('[[prompt]]\ncategory = "x"\n')
    with pytest.raises(SpecchatError, match="not a prompts file"):
        load_prompts(bad)
    with pytest.raises(SpecchatError, match="no prompts in categories"):
        load_prompts(categories=["poetry"])
    proc = specchat("bench", "--prompts", str(bad), tmp_path=tmp_path)
    assert proc.returncode == 2 and "not a prompts file" in proc.stderr
