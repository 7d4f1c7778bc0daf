"""Themes from the top-level themes/ folder, as Textual themes with specchat's token variables.

The token colours are theme variables (`$spec-accepted`, ...), so every theme sets them and the
live reply follows a theme change without re-rendering its text by hand.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from textual.theme import Theme

from specchat.engine.events import TokenKind
from specchat.resources import resource_dir

TOKEN_VARIABLES: dict[TokenKind, str] = {kind: f"spec-{kind.value}" for kind in TokenKind}
"""The theme variable that colours each kind of token."""
DEFAULT_TOKEN_COLOURS = {
    "spec-accepted": "#98c379", "spec-rejected": "#e06c75", "spec-corrected": "#e5c07b",
    "spec-bonus": "#56b6c2", "spec-target": "#d7dae0",
}
DEFAULT_THEME = "specchat-dark"


def token_style(kind: TokenKind) -> str:
    style = f"${TOKEN_VARIABLES[kind]}"
    return f"{style} strike" if kind is TokenKind.REJECTED else style


def load_themes(folder: Path | None = None) -> list[Theme]:
    themes = []
    for path in sorted((folder or resource_dir("themes")).glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        variables = {**DEFAULT_TOKEN_COLOURS, **data.pop("variables", {})}
        themes.append(Theme(variables=variables, **data))
    return themes

LEGEND_TEXT = {
    TokenKind.ACCEPTED: "accepted draft",
    TokenKind.REJECTED: "rejected draft",
    TokenKind.CORRECTED: "target correction",
    TokenKind.BONUS: "bonus",
    TokenKind.TARGET: "target only / first token",
}
"""What each token colour means, as the legend and the slides name it."""
