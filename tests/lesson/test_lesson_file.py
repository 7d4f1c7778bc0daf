"""The lesson's text file: the shipped one in an order that explains each thing before it is
used, every step with the presenter's answer, notes and time; a presenter's own file refused in
one line where it names a demonstration or leaves out a prompt, and its own answers, notes and
times reaching the presenter's notes."""

from __future__ import annotations

import pytest
from support.processes import specchat

from specchat.errors import SpecchatError
from specchat.lesson.demos import DEMOS
from specchat.lesson.exercises import EXERCISES
from specchat.lesson.script import default_path, load_lesson

BEFORE = [("cache", "verify"),  # the verify reads k+1 new positions against the cache
          ("sampling", "acceptance"), ("sampling", "verify_curve"),  # exactness, then economics
          ("other_vocab", "draft_choice"),  # the draft "as text", explained before it is raced
          ("verify_curve", "prose_vs_code"),  # "when it loses" says why from the costs before
          ("verify_curve", "sweep_k"), ("prose_vs_code", "break_even"),  # each exercise after
          ("ngram", "ngram_hunt"), ("draft_choice", "workload")]  # the step it builds on


def test_the_shipped_lesson_explains_each_thing_before_it_is_used():
    lesson = load_lesson(None, frozenset(DEMOS))
    order = [step.demo or step.exercise for step in lesson.steps]
    assert sorted(s.demo for s in lesson.steps if s.demo) == sorted(DEMOS)
    assert sorted(s.exercise for s in lesson.steps if s.exercise) == sorted(EXERCISES)
    for first, then in BEFORE:
        assert order.index(first) < order.index(then), (first, then)
    assert all(step.say and step.question and step.answer and step.notes and step.minutes > 0
               for step in lesson.steps)


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
    with pytest.raises(SpecchatError, match=r"step 3 \(The KV cache: what each model keeps\) "
                                            r"runs demo 'kv'"):
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


def test_a_presenters_answers_notes_and_times_reach_the_presenters_notes(tmp_path):
    mine = tmp_path / "mine.toml"
    text = default_path().read_text(encoding="utf-8")
    first = text.index('[[step]]\ntitle = "One token at a time"')
    step = text[first:text.index("[[step]]", first + 1)]
    own = "\n".join(line for line in step.splitlines()
                    if not line.startswith(("answer = ", "notes = ", "minutes = ")))
    own += '\nanswer = "Meine Antwort"\nnotes = "Meine Notizen"\nminutes = 7.5\n\n'
    mine.write_text(text[:first] + own + text[first + len(step):], encoding="utf-8")
    listed = specchat("lesson", "--file", str(mine), "--list", tmp_path=tmp_path)
    assert "7.5 min" in listed.stdout.splitlines()[1]
    out = tmp_path / "slides"
    made = specchat("lesson", "--file", str(mine), "--traces", "--export", str(out),
                    tmp_path=tmp_path)
    assert made.returncode == 0, made.stderr
    notes = (out / "presenter-notes.md").read_text(encoding="utf-8")
    assert "- time: 7.5 min (from minute 0 of" in notes
    assert "- answer: Meine Antwort" in notes and "- notes: Meine Notizen" in notes
    slide = (out / "lesson-01-one-token-at-a-time.html").read_text(encoding="utf-8")
    assert "Meine Antwort" not in slide and "Meine Notizen" not in slide  # the room's slides
