"""The lesson's text file: the shipped one in the issue's order, and a presenter's own file
refused in one line where it names a demonstration or leaves out a prompt."""

from __future__ import annotations

import pytest
from support.processes import specchat

from specchat.errors import SpecchatError
from specchat.lesson.demos import DEMOS
from specchat.lesson.script import default_path, load_lesson

ISSUE_ORDER = ["target_step", "draft", "verify", "cache", "acceptance", "verify_curve",
               "prose_vs_code", "ngram", "draft_choice", "sampling", "other_vocab", "latency"]


def test_the_shipped_lesson_has_every_step_in_order_each_with_lines_and_a_question():
    lesson = load_lesson(None, frozenset(DEMOS))
    assert [step.demo for step in lesson.steps] == ISSUE_ORDER
    assert all(step.say and step.question for step in lesson.steps)


def _without(text: str, key: str) -> str:
    """The file with the line that starts `key = ` left out."""
    lines = text.splitlines()
    kept = [line for line in lines if not line.startswith(f"{key} = ")]
    assert len(kept) == len(lines) - 1
    return "\n".join(kept)


def test_a_lesson_naming_an_unknown_demo_or_missing_a_prompt_is_refused(tmp_path):
    shipped = default_path().read_text(encoding="utf-8")
    bad_demo = tmp_path / "bad-demo.toml"
    bad_demo.write_text(shipped.replace('demo = "cache"', 'demo = "kv"'), encoding="utf-8")
    with pytest.raises(SpecchatError, match=r"step 4 \(The KV cache after a rejection\) runs demo 'kv'"):
        load_lesson(bad_demo, frozenset(DEMOS))
    no_prose = tmp_path / "no-prose.toml"
    no_prose.write_text(_without(shipped, "prose"), encoding="utf-8")
    with pytest.raises(SpecchatError, match=r"\[prompts\] needs prose"):
        load_lesson(no_prose, frozenset(DEMOS))


def test_a_translated_lesson_runs_its_own_words(tmp_path):
    mine = tmp_path / "de.toml"
    mine.write_text(default_path().read_text(encoding="utf-8").replace(
        'title = "One token at a time"', 'title = "Ein Token nach dem anderen"'), encoding="utf-8")
    listed = specchat("lesson", "--file", str(mine), "--list", tmp_path=tmp_path)
    assert listed.returncode == 0 and "1. Ein Token nach dem anderen" in listed.stdout
    bad = specchat("lesson", "--file", str(tmp_path / "none.toml"), "--list", tmp_path=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "lesson file not found" in bad.stderr
