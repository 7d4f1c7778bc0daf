"""Where the top-level `models/` and `themes/` folders are, installed or in a checkout.

A wheel carries them as `specchat/_data/<name>` (see pyproject's force-include); an editable
install or a source checkout reads them from the repository root.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"specchat's {name}/ folder is missing from the installation")
