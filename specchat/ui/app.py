"""The Textual app: the shell around the chat screen.

It keeps what outlives a screen: themes, the config file, the history store, the settings and
the `ModelKeeper` that loads models, and the screen stack. The chat itself (transcript, stats,
step panel, the turn's workers) lives in `ChatScreen`, which is handed what it needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.theme import Theme

from specchat.chat.history import HistoryStore
from specchat.config import Config
from specchat.keeper import ModelKeeper
from specchat.settings import Settings
from specchat.ui.chat.chat_screen import ChatScreen
from specchat.ui.launch import Launch
from specchat.ui.screens.costs_screen import CostsScreen
from specchat.ui.screens.lesson_screen import LessonScreen
from specchat.ui.screens.race_screen import RaceScreen
from specchat.ui.screens.settings_screen import FormValues, SettingsScreen
from specchat.ui.slides import DEFAULT_DIR, write_slide
from specchat.ui.theming import DEFAULT_THEME, DEFAULT_TOKEN_COLOURS, load_themes

SCREENSHOT_NAMES = {CostsScreen: "costs", RaceScreen: "race"}
"""What a screenshot of these screens is called after the conversation and turn."""


class SpecchatApp(App):
    TITLE = "specchat"
    CSS_PATH = Path(__file__).with_name("specchat.tcss")
    BINDINGS = [Binding("f8", "slides", "Slides", priority=True)]

    def __init__(self, settings: Settings | None = None, launch: Launch | None = None,
                 history: HistoryStore | None = None, config: Config | None = None) -> None:
        super().__init__()
        self.settings = settings or Settings()
        self.config = config or Config.load()
        self.history = history or HistoryStore()
        self.keeper = ModelKeeper(self.settings)
        self.chat_screen = ChatScreen(self.settings, self.keeper, self.history, launch)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if screen is self.chat_screen:
            yield SystemCommand("Lesson", "a guided lesson on speculative decoding, live (F9)",
                                self.chat_screen.action_lesson)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(DEFAULT_TOKEN_COLOURS)

    def on_mount(self) -> None:
        for theme in load_themes():
            self.register_theme(theme)
        ui = self.config.section("ui")
        saved = ui.get("theme", DEFAULT_THEME)
        self.theme = saved if saved in self.available_themes else DEFAULT_THEME
        self.theme_changed_signal.subscribe(self, self._remember_theme)
        self.chat_screen.show_rejected = bool(ui.get("show_rejected", True))
        if self.config.error:
            self.notify(self.config.error, severity="warning", timeout=10)
        self.push_screen(self.chat_screen)

    def _remember_theme(self, theme: Theme) -> None:
        ui = self.config.data.setdefault("ui", {})
        if self.config.error or ui.get("theme", DEFAULT_THEME) == theme.name:
            return  # never overwrite a broken config file; nothing new to write
        ui["theme"] = theme.name
        self.config.save()

    def action_slides(self, out: Path = DEFAULT_DIR) -> None:
        """F8: on the chat, every finished turn as SVG and HTML slides in the theme on screen;
        in the lesson, the step on screen; on the costs screen or a race, an SVG screenshot.
        Says where the files went; in a browser (`specchat serve`) they are also sent to it as
        downloads."""
        out = out.resolve()
        chat = self.chat_screen
        slides = chat.turn_slides()
        if self.screen is chat:
            if not slides:
                self.notify("no finished turn to make slides of yet")
                return
            files = [f for slide in slides for f in write_slide(slide, self.current_theme, out,
                                                                 show_rejected=chat.show_rejected)]
            what = f"slides of {len(slides)} turn{'s' * (len(slides) > 1)}"
        elif isinstance(self.screen, LessonScreen):
            files = self.screen.write_slide(out)
            what = "this step's slide"
        else:
            kind = SCREENSHOT_NAMES.get(type(self.screen), type(self.screen).__name__.lower())
            stem = slides[-1].stem if slides else "specchat"
            out.mkdir(parents=True, exist_ok=True)
            files = [Path(self.save_screenshot(f"{stem}-{kind}.svg", str(out)))]
            what = "a screenshot"
        if self.is_web:
            for path in files:
                self.deliver_text(path, save_filename=path.name)
        sent = " and sent to this browser" if self.is_web else ""
        self.notify(f"{what} written to {out}{sent}: " + ", ".join(f.name for f in files),
                    timeout=10)

    def action_settings(self) -> None:
        chat = self.chat_screen
        if self.screen is chat and not chat.busy:
            self.push_screen(SettingsScreen(self.settings, chat.show_rejected), self.apply_settings)

    def apply_settings(self, values: FormValues | None) -> None:
        """Use the new settings from the next turn on, and save them (never over a broken
        config file)."""
        if values is None:
            return
        current, chat = self.settings, self.chat_screen
        current.models, current.draft, current.sampling = (
            values.settings.models, values.settings.draft, values.settings.sampling)
        chat.models.settings_changed()
        if values.show_rejected != chat.show_rejected:
            chat.action_toggle_rejected()
        if self.config.error:
            self.notify("settings in use but not saved: " + self.config.error, severity="warning")
            return
        self.config.data["engine"] = current.saved()
        self.config.data.setdefault("ui", {})["show_rejected"] = chat.show_rejected
        self.config.save()
        chat.set_status("settings saved")

