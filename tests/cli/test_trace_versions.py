"""Traces carry counts; a turn's rates are derived where they are read. Every shipped trace
(version 1, which wrote its rates) replays with the rates it wrote, its counts rebuilt from its
rounds; a version-2 trace's written rates are not read back."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from specchat.engine.events import DERIVED, TurnCounts, TurnDiagnostics, TurnEvent
from specchat.trace import VERSION, event_from_json, read_trace, shipped_traces


def turns(events) -> list[TurnEvent]:
    return [e for e in events if isinstance(e, TurnEvent)]


@pytest.mark.parametrize("path", shipped_traces(), ids=lambda p: p.stem)
def test_every_shipped_trace_replays_with_the_rates_it_wrote(path):
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    written = [d for d in lines if d.get("type") == "turn"]
    read = turns(read_trace(path).events)
    assert written and len(read) == len(written)
    for data, turn in zip(written, read):
        assert turn.counts.decode_tokens >= 0
        for name in (n for n in DERIVED if n in data):  # the oldest wrote no speedup
            assert getattr(turn.counts, name) == pytest.approx(data[name], rel=1e-9), name


def test_a_trace_of_this_version_reads_its_counts_not_its_rates(tiny, tmp_path):
    from support.processes import specchat

    path = tmp_path / "turn.jsonl"
    proc = specchat("ask", "count me", "--target", str(tiny.target), "--draft", str(tiny.draft),
                    "--max-tokens", "24", "--k", "3", "--policy", "fixed", "--trace", str(path),
                    tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["version"] == VERSION == 2
    turn = turns(read_trace(path).events)[0]
    data = json.loads(lines[-1])
    assert turn.counts.n_drafted > 0 and turn.counts.acceptance_rate == data["acceptance_rate"]
    data |= {"acceptance_rate": 0.123, "tokens_per_second": 1.0, "speedup": 9.0}
    path.write_text("\n".join([*lines[:-1], json.dumps(data)]) + "\n", encoding="utf-8")
    again = turns(read_trace(path).events)[0]
    assert again.counts.acceptance_rate == turn.counts.n_accepted / turn.counts.n_drafted
    assert (again.counts.tokens_per_second, again.counts.speedup) == (turn.counts.tokens_per_second,
                                                                      turn.counts.speedup)
    written = json.loads(lines[-1])  # the line as ask wrote it: read back, it writes the same
    assert all(f.name in written for kind in (TurnCounts, TurnDiagnostics) for f in fields(kind))
    assert json.loads(json.dumps(event_from_json(written).to_json())) == written
