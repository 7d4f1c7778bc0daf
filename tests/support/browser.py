"""A real browser on a real `specchat serve`: Debian's headless Chromium, driven by playwright's
Python API (pointed at the system's Chromium: playwright's own browser download needs the
internet), and the served app as a subprocess on a free loopback port."""

from __future__ import annotations

import io
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from support.processes import free_port, saved_messages, specchat_env

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
"""Without the networking flags Chromium keeps trying to reach Google on a closed network."""
VIEWPORT = {"width": 1280, "height": 800}
TRANSCRIPT = (0.0, 0.04, 0.65, 0.75)
"""Where the app draws the conversation at VIEWPORT: above the legend, left of the stats panel
(as fractions of the screenshot: left, top, right, bottom)."""


def chromium_binary() -> str | None:
    return next((p for p in (shutil.which("chromium"), "/usr/bin/chromium") if p and
                 os.access(p, os.X_OK)), None)


class Served:
    """`specchat serve --port P [--max-sessions N] -- APP ARGS`, started and stopped by a test."""

    def __init__(self, tmp_path: Path, *app_args: str, max_sessions: int = 8,
                 program: Sequence[str] = (sys.executable, "-m", "specchat"),
                 env: dict[str, str] | None = None) -> None:
        """`program`: the specchat to run (another venv's); `env`: added to `specchat_env`."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.proc = subprocess.Popen(
            [*program, "serve", "--port", str(self.port), "--max-sessions",
             str(max_sessions), "--", *app_args], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
            env=specchat_env(tmp_path) | {"TMPDIR": str(tmp_path)} | (env or {}))
        assert self.proc.stdout is not None
        self.banner = self.proc.stdout.readline()
        assert self.banner.startswith("specchat serve on"), self.banner
        found = re.search(r"histories go to (\S+?)\. ", self.banner)
        assert found, self.banner
        self.history_dir = Path(found.group(1))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        raise AssertionError(f"specchat serve did not listen on {self.port}")

    def histories(self) -> list[Path]:
        return sorted(self.history_dir.glob("tab-*.sqlite3"))

    def stop(self) -> str:
        """Stop it (Ctrl-C) and return what it printed."""
        self.proc.send_signal(2)
        try:
            out, _ = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return self.banner + out


@contextmanager
def browser(binary: str) -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=binary, args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


def colour_pixels(png: bytes, colour: str, box: tuple[float, float, float, float]) -> int:
    """How many pixels of a screenshot are `colour` (#rrggbb, within 12 per channel) inside
    `box`, given as fractions of the image (left, top, right, bottom)."""
    import numpy as np
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    h, w, _ = image.shape
    left, top, right, bottom = box
    region = image[int(top * h):int(bottom * h), int(left * w):int(right * w)]
    rgb = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(region - rgb).max(axis=2) <= 12).sum())


def wait_for(check, what: str, timeout: float = 60.0, every: float = 0.25):
    """Poll `check` until it returns something true; fail naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(every)
    raise AssertionError(f"{what} within {timeout:.0f} s")


def drawn(page) -> None:
    """Wait until the app in the page has drawn its first screen (keys typed before it runs
    are lost)."""
    wait_for(lambda: "-first-byte" in page.evaluate("document.body.className"),
             "the app's first screen in the page")


def send_typed_message(page, history: Path, timeout: float = 120.0) -> None:
    """Press Enter until the tab's app has saved the message typed into it: the app ignores
    Enter until its models are loaded, which takes longer on a busy machine. Fails saying the
    message was never taken, not later on a reply that never came."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page.keyboard.press("Enter")
        polled = time.monotonic() + 0.5
        while time.monotonic() < polled:
            if saved_messages(history, "user"):
                return
            time.sleep(0.1)
    raise AssertionError(f"the tab's app took the typed message within {timeout:.0f} s")
