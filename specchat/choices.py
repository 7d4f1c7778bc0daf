"""The choices a user names as text, as types parsed once where the text comes in: the draft
(`none`, `ngram`, a model, `ngram+MODEL`), and a model's role (the draft policy is the engine's `PolicyKind`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

NONE, NGRAM, COMBINED = "none", "ngram", "ngram+"


class ChoiceError(ValueError, argparse.ArgumentTypeError):
    """A text that names no choice; argparse shows its message as it is."""


class ModelRole(StrEnum):
    TARGET = "target"
    DRAFT = "draft"


@dataclass(frozen=True)
class DraftChoice:
    """Which drafter a run uses: none (the target alone), n-gram lookup, a draft model (a GGUF
    path, a catalog name or `default`), or n-gram lookup first and the model otherwise."""

    ngram: bool = False
    model: str | None = None

    @classmethod
    def parse(cls, text: str) -> DraftChoice:
        """The choice `text` names; ChoiceError (a ValueError) for an empty one, or `ngram+`
        without a model."""
        text = text.strip()
        if not text:
            raise ChoiceError("no draft named: give none, ngram, a model or ngram+MODEL")
        if text == NONE:
            return cls()
        if text == NGRAM:
            return cls(ngram=True)
        if text.startswith(COMBINED):
            model = text[len(COMBINED):]
            if not model or model in (NONE, NGRAM) or model.startswith(COMBINED):
                raise ChoiceError(f"{text}: after 'ngram+' name a draft model (a GGUF path, a "
                                 "catalog name or 'default')")
            return cls(ngram=True, model=model)
        return cls(model=text)

    @classmethod
    def of(cls, choice: DraftChoice | str) -> DraftChoice:
        return choice if isinstance(choice, DraftChoice) else cls.parse(choice)

    def __str__(self) -> str:
        """The choice as `--draft` takes it."""
        if self.model is None:
            return NGRAM if self.ngram else NONE
        return COMBINED + self.model if self.ngram else self.model

    @property
    def none(self) -> bool:
        """The target alone."""
        return not self.ngram and self.model is None

    @property
    def ngram_only(self) -> bool:
        return self.ngram and self.model is None

    @property
    def combined(self) -> bool:
        return self.ngram and self.model is not None

    def with_model(self, model: str) -> DraftChoice:
        """The same choice with the model named otherwise (a name resolved to its path)."""
        return DraftChoice(self.ngram, model)

    @property
    def key(self) -> str:
        """The choice as the draft menu and `specchat tune` both name it: a model by its file
        name (the menu holds paths, tune is given names)."""
        return str(self if self.model is None else self.with_model(Path(self.model).name))

    @property
    def short(self) -> str:
        """The choice as a person names it: a GGUF path by its file stem."""
        if self.model is None or not self.model.endswith(".gguf"):
            return str(self)
        return str(self.with_model(Path(self.model).stem))


def draft_text(text: str) -> str:
    """A settings field's parser: the draft as given, refused (ValueError) where it names none."""
    return str(DraftChoice.parse(text))
