"""The draft choice is parsed in one place (specchat/choices.py): every choice it can hold reads
back from its text, and a text that names no drafter is refused where it comes in."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specchat.choices import DraftChoice

models = st.text(st.characters(blacklist_characters="\n\r\t ", blacklist_categories=("Cs",)),
                 min_size=1, max_size=30).filter(
    lambda m: m == m.strip() and m not in ("none", "ngram") and not m.startswith("ngram+"))


@given(st.booleans(), st.none() | models)
def test_every_choice_reads_back_from_its_text(ngram, model):
    choice = DraftChoice(ngram, model)
    assert DraftChoice.parse(str(choice)) == choice


@pytest.mark.parametrize(("text", "ngram", "model"), [
    ("none", False, None), ("ngram", True, None), ("default", False, "default"),
    ("ngram+default", True, "default"), ("/m/qwen+x.gguf", False, "/m/qwen+x.gguf"),
    ("ngram+/m/a+b.gguf", True, "/m/a+b.gguf")])
def test_the_forms_the_flag_takes(text, ngram, model):
    choice = DraftChoice.parse(text)
    assert (choice.ngram, choice.model) == (ngram, model)
    assert choice.none == (text == "none") and choice.combined == (ngram and model is not None)


@pytest.mark.parametrize("text", ["", "  ", "ngram+", "ngram+none", "ngram+ngram",
                                  "ngram+ngram+default"])
def test_a_text_that_names_no_drafter_is_refused(text):
    with pytest.raises(ValueError):
        DraftChoice.parse(text)


def test_keys_and_short_names_take_a_model_by_its_file():
    choice = DraftChoice.parse("ngram+/models/qwen2.5-0.5b-q4_0.gguf")
    assert choice.key == "ngram+qwen2.5-0.5b-q4_0.gguf"
    assert choice.short == "ngram+qwen2.5-0.5b-q4_0"
    assert DraftChoice.parse("ngram").key == "ngram"


def test_settings_refuse_a_draft_that_names_no_drafter():
    from specchat import settings as schema

    parser = schema.argparse.ArgumentParser(exit_on_error=False)
    schema.add_arguments(parser, schema.Settings(), sections=("models",))
    with pytest.raises(schema.argparse.ArgumentError, match="--draft"):
        parser.parse_args(["--draft", "ngram+"])
    args = parser.parse_args(["--draft", "ngram+default"])
    assert schema.from_args(args).models.draft == "ngram+default"
