"""A busy machine named: the share of the CPU other programs took during a turn, measured on
real turns of the tiny pair with and without busy loops beside them, and the words every front
end shows for it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.models import GREEDY, load
from support.tinymodels import TinySpec, write_tiny_gguf

from specchat.engine.cpu import BUSY_SHARE, CpuSample, busy_note, free_cores, others_running, others_share
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import turn_of
from specchat.engine.loop import GenerationSettings, SpeculativeEngine
from specchat.render import slower_why, stats_line


@given(busy=st.integers(0, 10_000), idle=st.integers(0, 10_000), mine=st.integers(0, 10_000))
def test_the_others_share_is_the_busy_time_this_process_did_not_use(busy, idle, mine):
    """Whole ticks of 10 ms, as /proc/stat counts them."""
    start = CpuSample(10.0, 20.0, 1.0, at=0.0)
    end = CpuSample(10.0 + busy / 100, 20.0 + (busy + idle) / 100, 1.0 + min(mine, busy) / 100,
                    at=1.0)
    share = others_share(start, end)
    if busy + idle == 0:
        assert share is None
    else:
        assert share is not None and 0.0 <= share <= 1.0
        assert share == pytest.approx((busy - min(mine, busy)) / (busy + idle), abs=1e-9)
    assert others_share(start, CpuSample(end.busy_s, end.total_s, end.mine_s, at=0.4)) is None


def turn_beside(loops: int, model):
    """A turn of over a second on a tiny model, with `loops` busy loops running beside it."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(loops)]
    try:
        time.sleep(0.3 if loops else 0.0)  # let them spin up
        target = load(model, n_ctx=65536)
        engine = SpeculativeEngine(target, NoDrafter(), GREEDY)
        ids = target.tokenize(target.render_chat([("user", "tell me everything")]))
        turn = turn_of(engine.generate(ids, GenerationSettings(max_tokens=3000)))
        target.close()
        assert turn.wall_s > 1.0
        return turn
    finally:
        for p in busy:
            p.kill()
            p.wait()


def test_a_turn_beside_busy_programs_says_its_timings_are_unreliable(tmp_path):
    model = tmp_path / "tiny-long.gguf"
    write_tiny_gguf(model, TinySpec(seed=0, n_ctx=65536))  # its replies run for a minute
    quiet = turn_beside(0, model)
    assert quiet.others_cpu is not None and quiet.others_cpu < BUSY_SHARE
    assert "other programs" not in stats_line(quiet)
    crowded = turn_beside(2, model)
    assert crowded.others_cpu is not None and crowded.others_cpu >= BUSY_SHARE
    note = busy_note(crowded.others_cpu)
    assert note.startswith(f"other programs used {crowded.others_cpu:.0%} of the CPU")
    assert note.endswith("its timings are unreliable")
    assert "Other programs used" in stats_line(crowded)
    assert slower_why(crowded) == f" · {note}"  # no speedup explained from such timings


@given(st.integers(0, 200), st.integers(1, 64))
def test_free_cores_leave_one_thread_at_least_and_never_more_than_the_cores(others, cores):
    free = free_cores(others, cores)
    assert 1 <= free <= cores and free == max(1, cores - others)
    assert free_cores(None, cores) == cores


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores to leave one free")
def test_a_turn_after_other_programs_took_a_core_runs_on_the_cores_left(tmp_path):
    """llama.cpp's threads wait on each other at every step when one of them has no core: the
    engine gives a turn one thread per core other programs leave free when it starts, and says
    so; a thread count the user fixed stays."""
    cores = os.cpu_count() or 1
    model = tmp_path / "tiny.gguf"
    write_tiny_gguf(model, TinySpec(seed=0))
    from specchat.backends.llamacpp import LlamaCppBackend

    auto, fixed = LlamaCppBackend(model, n_ctx=1024), LlamaCppBackend(model, n_ctx=1024,
                                                                      n_threads=cores)
    engines = [SpeculativeEngine(b, NoDrafter(), GREEDY) for b in (auto, fixed)]
    ids = auto.tokenize(auto.render_chat([("user", "hello")]))

    def turns() -> list:
        return [turn_of(e.generate(ids, GenerationSettings(max_tokens=8))) for e in engines]

    assert [t.threads for t in turns()] == [cores, cores]
    assert others_running() == 0  # nothing else runs here (this process's threads not counted)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores - 1)]
    try:
        time.sleep(0.5)  # the loops running: all cores but one taken
        crowded = turns()
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert [t.threads for t in crowded] == [1, cores]
    assert "threads 1 (the other cores were busy before it)" in stats_line(crowded[0])
    assert [t.threads for t in turns()] == [cores, cores]  # the cores came back
    auto.close()
    fixed.close()
