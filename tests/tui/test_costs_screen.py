"""Why it is faster or slower here: the costs screen timing this machine on tiny real models
(Pilot), and the status line's one-line reason after a slower reply."""

from __future__ import annotations

import pytest
from support.pilot import SIZE, make_app, ready, run_async, say, until

from specchat.ui.chat.chat_screen import ChatScreen


def test_the_costs_screen_times_this_machine_and_says_why(tiny, tmp_path):
    from specchat.ui.screens.costs_screen import CostsScreen

    app = make_app(tiny, tmp_path, max_tokens=16)

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await say(app, pilot, "how fast is this?")
            target_before = list(app.chat_screen.chat.session.engine.target.tokens)
            await pilot.press("f7")
            await until(pilot, lambda: isinstance(app.screen, CostsScreen)
                        and app.screen.costs is not None)
            screen = app.screen
            text = str(screen.query_one("#why").render())
            costs = screen.costs
            assert len(costs.verify) == 16 and costs.draft > 0
            assert f"Verifying 4 tokens costs {costs.steps(4):.2f} (±" in text
            assert "the middle half of 5 interleaved timings) target steps here" in text
            turns = app.chat_screen.chat.measured_turns()
            assert len(turns) == 1 and len(costs.verify_spread) == 16
            assert "against what they measured: k=3 " in text
            assert f"→ {turns[0].speedup:.2f}x" in text
            assert "break even" in text or "would not pay" in text
            assert app.chat_screen.chat.session.engine.target.tokens == target_before  # caches untouched
            before = screen.accept
            await pilot.press("plus")
            assert screen.accept[0] == pytest.approx(min(1.0, before[0] + 0.05))
            assert "what-if" in str(screen.query_one("#why").render())
            await pilot.press("g")
            assert "GPU-shaped curve" in str(screen.query_one("#why").render())
            await pilot.press("escape")
            assert isinstance(app.screen, ChatScreen)
            await say(app, pilot, "and after?")  # the conversation goes on where it was
    run_async(scenario)


def test_a_slower_reply_says_why_from_what_it_measured():
    from specchat.engine.events import TurnEvent
    from specchat.engine.stats import TurnStats
    from specchat.wording import slower_why

    turn = TurnStats().turn_event(text="", token_ids=[1] * 31, prompt_ids=[0], wall_s=3.0,
                                  target_passes=11, draft_passes=30, draft="d", k=3,
                                  policy="fixed k=3", stop_reason="max_tokens")
    from dataclasses import replace

    def counted(**counts) -> TurnEvent:
        return replace(turn, counts=replace(turn.counts, **counts))

    # 30 tokens after the first in 2 s (15 tok/s) against 20 tok/s; drafting rounds of 3 tokens
    slow = dict(rounds=11, decode_s=2.0, decode_tokens=30, spec_rounds=10, spec_emitted=30,
                baseline_tokens_per_second=20.0)
    c = counted(**slow).counts
    assert (c.tokens_per_second, c.speedup, c.mean_accepted_length) == (15.0, 0.75, 3.0)
    # 10 rounds after the first took 2 s: 0.2 s = 4 target steps of 50 ms, for 3 tokens each
    assert slower_why(counted(**slow)) == (" · 0.75x: 4.0 steps a round for 3.0 tokens (why: F7, "
                                           "specchat tune)")
    assert slower_why(counted(**slow | {"baseline_tokens_per_second": 12.5})) == ""
    # 30 tokens in 2 s against 1.5 s of plain steps: 0.5 s lost. A catch-up of the draft on
    # tokens it sat out that took half of that or more is the reason given, in steps
    caught = counted(**slow, catchup_tokens=60, catchup_s=0.3)
    assert slower_why(caught) == (" · 0.75x: draft catch-up on 60 tokens took 6.0 steps "
                                  "(why: F7, specchat tune)")
    assert "steps a round" in slower_why(counted(**slow, catchup_s=0.2))
