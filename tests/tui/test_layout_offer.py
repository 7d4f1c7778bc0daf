"""The first-run offer to re-lay the default pair for this CPU: the modal, the real quantizer
and measurement on the tiny pair, and the chat loading the pair again after it. What decides
whether to offer (the default pair installed, a CPU with repacked kernels) is set here; what
the offer then does is real."""

from __future__ import annotations

import asyncio

from support.pilot import SIZE, make_app, ready, until

from specchat.catalog.layout import Q4_0, Derived, load_derived, save_derived
from specchat.config import Config
from specchat.optimize.command import Job, already_made
from specchat.settings import ModelOptions, Settings
from specchat.ui.screens.layout_offer import LayoutOfferScreen, Offer, layout_offer


def answer_the_offer(tiny, tmp_path, monkeypatch, button: str) -> tuple:
    """The app on the tiny pair, offered the tiny draft's re-laying; `button` pressed once the
    offer is up (or a key, "key:NAME", or words typed then Enter, "type:WORDS"). Returns the
    chat before and after the offer closed."""
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("SPECCHAT_CONFIG", str(tmp_path / "config.toml"))
    job = Job(tiny.draft, "tiny-draft", "draft")
    offer = Offer(Q4_0, "x86 with AVX2", [job])
    # offered until made, as layout_offer does: the reloaded pair is not offered again
    monkeypatch.setattr("specchat.ui.chat.model_loading.layout_offer", lambda settings: None if
                        already_made(job, Q4_0, tmp_path / "models") else offer)
    app = make_app(tiny, tmp_path, warm_up=False)
    chats = []

    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await ready(app, pilot)
            await until(pilot, lambda: isinstance(app.screen, LayoutOfferScreen))
            await pilot.pause()
            chats.append(app.chat_screen.chat)
            if button.startswith("key:"):
                await pilot.press(button.removeprefix("key:"))
            elif button.startswith("type:"):  # in one burst, as a message typed on arrives
                keys = ["space" if c == " " else c for c in button.removeprefix("type:")]
                await pilot.press(*keys, "enter")
            else:
                assert await pilot.click(f"#{button}")
            await until(pilot, lambda: not isinstance(app.screen, LayoutOfferScreen), 120)
            if button == "make":  # the pair loads again
                await until(pilot, lambda: app.chat_screen.chat not in (None, chats[0]))
            if button.startswith("type:"):  # the message's reply, to its end
                await until(pilot, lambda: len(app.chat_screen.chat.session.conversation.messages)
                            == 2 and not app.chat_screen.busy, 120)
            else:
                await ready(app, pilot)
            chats.append(app.chat_screen.chat)
            await app.workers.wait_for_complete()  # the offer's check ran on the reloaded pair
            await pilot.pause()
            assert not isinstance(app.screen, LayoutOfferScreen)

    asyncio.run(scenario())
    return chats[0], chats[1]


def test_the_offer_re_lays_the_pair_and_the_chat_loads_it_again(tiny, tmp_path, monkeypatch):
    before, after = answer_the_offer(tiny, tmp_path, monkeypatch, "make")
    assert after is not before
    models = tmp_path / "models"
    record = load_derived(models)["tiny-draft.cpu-q4_0"]
    assert (models / record.file).is_file() and record.role == "draft" and record.quality == {}
    assert record.cost["derived"]["verify_steps"][0] == 1.0


def test_an_enter_meant_for_the_prompt_does_not_start_making_the_copies(tiny, tmp_path,
                                                                       monkeypatch):
    """The offer comes up after the prompt is ready: a user typing a message then pressing Enter
    as it appears answers "Not now", never "Make them" (minutes of work they did not ask for)."""
    before, after = answer_the_offer(tiny, tmp_path, monkeypatch, "key:enter")
    assert after is before
    assert not (tmp_path / "models").exists()  # nothing made


def test_a_message_typed_as_the_offer_appears_is_sent_not_lost(tiny, tmp_path, monkeypatch):
    """Typed while the offer shows, it goes to the message box; its Enter answers "Not now"
    and sends it."""
    before, after = answer_the_offer(tiny, tmp_path, monkeypatch, "type:Say hi tiny model")
    assert after is before and not (tmp_path / "models").exists()
    said = [text for role, text in after.session.conversation.messages if role == "user"]
    assert said == ["Say hi tiny model"]


def test_never_ask_is_kept_in_the_config_and_the_chat_goes_on(tiny, tmp_path, monkeypatch):
    before, after = answer_the_offer(tiny, tmp_path, monkeypatch, "never")
    assert after is before  # the pair it had
    assert Config.load().section("models")["optimize_offer"] == "never"
    assert not (tmp_path / "models").exists()  # nothing made


def test_the_offer_is_made_once_for_the_default_pair_on_a_cpu_with_the_kernels(
        tiny, tmp_path, monkeypatch):
    models = tmp_path / "models"
    models.mkdir()
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(models))
    monkeypatch.setenv("SPECCHAT_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setattr("specchat.ui.screens.layout_offer.choose_layout",
                        lambda info, gpu: (Q4_0, "x86 with AVX2"))
    monkeypatch.setattr("specchat.ui.screens.layout_offer.jobs",
                        lambda choice, catalog: [Job(tiny.draft, "tiny-draft", "draft")])
    default = Settings(ModelOptions(target="default"))
    offer = layout_offer(default)
    assert offer is not None and [j.name for j in offer.todo] == ["tiny-draft"]
    assert layout_offer(Settings(ModelOptions(target=str(tiny.target)))) is None
    assert layout_offer(Settings(ModelOptions(target="default", server="http://x:1"))) is None
    made = models / "tiny-draft.cpu-q4_0.gguf"  # made already: nothing to offer
    made.write_bytes(b"gguf")
    save_derived(models, Derived("tiny-draft.cpu-q4_0", "tiny-draft", "tiny-draft.gguf", "",
                                 "F32", "Q4_0", made.name, 4, ""))
    assert layout_offer(default) is None
    made.unlink()
    assert layout_offer(default) is not None
    config = Config.load()
    config.data["models"] = {"optimize_offer": "never"}
    config.save()
    assert layout_offer(default) is None  # said no for good


def test_the_offer_fits_its_dialog_and_leaves_no_button_while_it_works(tiny, monkeypatch):
    """Each line wraps inside the dialog (none cut at its edge), and once "Make them" is
    pressed no button is left to press until it fails."""
    from textual.app import App
    from textual.containers import Horizontal, Vertical
    from textual.widgets import Label

    offer = Offer(Q4_0, "x86 with AVX-512: llama.cpp repacks Q4_0 into 8-row interleaved blocks",
                  [Job(tiny.draft, "qwen2.5-coder-0.5b-instruct-q4_k_m", "draft"),
                   Job(tiny.target, "qwen2.5-coder-1.5b-instruct-q4_k_m", "target")])
    monkeypatch.setattr(LayoutOfferScreen, "make_all", lambda self: None)

    class Host(App):
        def on_mount(self) -> None:
            self.push_screen(LayoutOfferScreen(offer))

    async def scenario():
        app = Host()
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            dialog = app.screen.query_one(Vertical)
            for label in app.screen.query(Label):
                assert label.region.right <= dialog.content_region.right
                assert label.virtual_size.width <= label.size.width
            assert await pilot.click("#make")
            await pilot.pause()
            assert not app.screen.query_one(Horizontal).display
            app.screen._failed()
            await pilot.pause()
            assert app.screen.query_one(Horizontal).display
            assert app.screen.query_one("#make").disabled

    asyncio.run(scenario())
