"""Fuzzing the readers of outside input: each either reads or refuses in one clear line."""

from __future__ import annotations

from collections import Counter

from specchat.errors import SpecchatError

FUZZED: Counter[str] = Counter()
"""Inputs each reader of outside input was given by the fuzz tests (printed at the end)."""


def read_or_one_line(reader: str, read, *args):
    """`read(*args)`'s value, or None when it refused the input with a SpecchatError of one
    clear line (anything else, a traceback, fails the test)."""
    FUZZED[reader] += 1
    try:
        return read(*args)
    except SpecchatError as exc:
        text = str(exc)
        assert text and "\n" not in text, text
        return None
