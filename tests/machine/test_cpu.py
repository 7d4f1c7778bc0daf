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

from specchat.cpu import BUSY_SHARE, CpuSample, CpuWatch, busy_note, free_cores, others_share
from specchat.engine.drafters import NoDrafter
from specchat.engine.events import turn_of
from specchat.engine.loop import GenerationSettings, SpeculativeEngine
from specchat.wording import slower_why, stats_line


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
    """A turn of over a second on a tiny model, watched as specchat watches its turns, with
    `loops` busy loops running beside it."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(loops)]
    try:
        time.sleep(0.3 if loops else 0.0)  # let them spin up
        target = load(model, n_ctx=65536)
        engine = SpeculativeEngine(target, NoDrafter(), GREEDY)
        engine.watch = CpuWatch()
        ids = target.tokenize(target.render_chat([("user", "tell me everything")]))
        turn = turn_of(engine.generate(ids, GenerationSettings(max_tokens=3000)))
        target.close()
        assert turn.counts.wall_s > 1.0
        return turn
    finally:
        for p in busy:
            p.kill()
            p.wait()


def test_a_turn_beside_busy_programs_says_its_timings_are_unreliable(tmp_path):
    """Real busy loops beside a real turn. The host may be loaded already (CI shares it): then
    the turn without loops is flagged too, and says so as the crowded one does."""
    model = tmp_path / "tiny-long.gguf"
    write_tiny_gguf(model, TinySpec(seed=0, n_ctx=65536))  # its replies run for a minute
    cores = os.cpu_count() or 2  # the share is the whole machine's: a loop for every core
    for turn in (turn_beside(0, model), crowded := turn_beside(cores, model)):
        assert turn.diagnostics.others_cpu is not None
        note = busy_note(turn.diagnostics.others_cpu)
        if turn.diagnostics.others_cpu < BUSY_SHARE:
            assert note == "" and "other programs" not in stats_line(turn).lower()
        else:
            assert note.startswith(f"other programs used {turn.diagnostics.others_cpu:.0%} of the CPU")
            assert note.endswith("its timings are unreliable")
            assert "Other programs used" in stats_line(turn)
            assert slower_why(turn) == f" · {note}"  # no speedup explained from such timings
    assert crowded.diagnostics.others_cpu >= BUSY_SHARE  # a loop a core: at least half the CPU


@given(st.integers(0, 200), st.integers(1, 64))
def test_free_cores_leave_one_thread_at_least_and_never_more_than_the_cores(others, cores):
    free = free_cores(others, cores)
    assert free is not None and 1 <= free <= cores and free == max(1, cores - others)
    assert free_cores(None, cores) == cores
    assert free_cores(others, None) is None


@pytest.mark.parametrize(("physical", "running", "threads"), [
    (8, 0, 8),      # 16 logical cores on 8 physical: 8 threads, not 16
    (8, 1, 7),      # one busy core: 7
    (8, None, 8),   # no /proc (macOS): all of them
    (None, 0, None),  # unknown topology: the model keeps llama.cpp's own default
    (2, 5, 1),      # more busy than cores: one thread still
])
def test_the_watch_gives_a_turn_the_free_physical_cores(physical, running, threads):
    watch = CpuWatch(cores=lambda: physical, running=lambda: running, clock=lambda: None)
    assert watch.begin() == threads
    assert watch.end() is None  # no clock: nothing measured


def test_the_watch_measures_what_others_used_between_begin_and_end():
    samples = iter([CpuSample(10.0, 20.0, 1.0, at=0.0), CpuSample(11.5, 22.0, 1.5, at=1.0)])
    watch = CpuWatch(cores=lambda: 2, running=lambda: 0, clock=lambda: next(samples))
    assert watch.begin() == 2
    assert watch.end() == pytest.approx(0.5)  # 1.5 s busy of 2.0, 0.5 of them this process's


def test_a_turn_runs_on_the_threads_the_watch_gives_and_a_fixed_count_stays(tmp_path):
    """The engine fits each turn's threads to what its watch says the free cores are (faked
    here: a loaded host cannot move the count); a thread count the user fixed stays."""
    model = tmp_path / "tiny.gguf"
    write_tiny_gguf(model, TinySpec(seed=0))
    from specchat.backends.llamacpp import LlamaCppBackend

    auto, fixed = LlamaCppBackend(model, n_ctx=1024), LlamaCppBackend(model, n_ctx=1024,
                                                                        n_threads=2)
    busy = {"others": 0}
    engines = [SpeculativeEngine(b, NoDrafter(), GREEDY) for b in (auto, fixed)]
    for engine in engines:
        engine.watch = CpuWatch(cores=lambda: 2, running=lambda: busy["others"],
                                clock=lambda: None)
    ids = auto.tokenize(auto.render_chat([("user", "hello")]))

    def turns() -> list:
        return [turn_of(e.generate(ids, GenerationSettings(max_tokens=8))) for e in engines]

    assert [t.diagnostics.threads for t in turns()] == [min(2, auto.n_threads), 2]
    busy["others"] = 1
    crowded = turns()
    assert [t.diagnostics.threads for t in crowded] == [1, 2]
    assert "threads 1 (the other cores were busy before it)" in stats_line(crowded[0])
    busy["others"] = 0
    assert [t.diagnostics.threads for t in turns()] == [min(2, auto.n_threads), 2]  # the cores came back
    engines[0].watch = None  # no watch: the threads are left as they are, and not reported
    assert turn_of(engines[0].generate(ids, GenerationSettings(max_tokens=4))).diagnostics.threads is None
    auto.close()
    fixed.close()
