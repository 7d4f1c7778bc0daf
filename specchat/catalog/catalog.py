"""The model catalog (models/catalog.toml), the models folders, and name-to-file resolution.

`--target` / `--draft` take a path, a catalog name, the stem of a GGUF in a models folder, or
`default` (the default pair's model for that role: its CPU layout where `specchat models
optimize` made one, else the file the catalog ships).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from specchat.catalog.layout import derived_of
from specchat.config import APP, Config
from specchat.errors import ModelFileError, ModelNotInstalledError
from specchat.resources import resource_dir


@dataclass(frozen=True)
class CatalogModel:
    name: str
    family: str
    params: str
    quant: str
    file: str
    size: int
    sha256: str
    sources: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Catalog:
    models: dict[str, CatalogModel]
    pairs: dict[str, dict[str, str]]

    @classmethod
    def load(cls, path: Path | None = None) -> Catalog:
        """The catalog file; a file that is not one raises ModelFileError with the reason."""
        path = path or resource_dir("models") / "catalog.toml"
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
            models = {name: _model(name, m) for name, m in raw.get("models", {}).items()}
            pairs = raw.get("pairs", {})
            for pair, roles in pairs.items():
                if not isinstance(roles, dict) or any(
                        roles.get(role) not in models for role in ("target", "draft")):
                    raise ValueError(f"pair {pair!r} needs a target and a draft from [models]")
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            reason = " ".join(str(exc).split())
            raise ModelFileError(f"not a usable model catalog: {path} ({reason})") from None
        return cls(models, pairs)

    def pair_models(self, pair: str = "default") -> list[CatalogModel]:
        if pair not in self.pairs:
            raise ModelFileError(f"no pair named {pair!r} in the catalog")
        return [self.models[self.pairs[pair][role]] for role in ("target", "draft")]


def _model(name: str, m: dict[str, Any]) -> CatalogModel:
    """One [models.NAME] table, its fields checked (a size is an int, the rest text)."""
    fields = {k: m[k] for k in ("family", "params", "quant", "file", "size", "sha256")}
    sources = m.get("sources", [])
    if not isinstance(fields["size"], int) or not all(
            isinstance(fields[k], str) for k in fields if k != "size") or not isinstance(
            sources, list) or not all(isinstance(s, dict) for s in sources):
        raise ValueError(f"model {name!r}: a field has the wrong type")
    return CatalogModel(name=name, sources=list(sources), **fields)


def user_path(text: str) -> Path:
    """`text` with `~` expanded as a shell expands it; as it is where `~name` names no user on
    this machine (a config from elsewhere): such a path leads nowhere, so it reads as a missing
    file or folder instead of a traceback."""
    path = Path(text)
    try:
        return path.expanduser()
    except RuntimeError:
        return path


def models_dir(config: Config | None = None) -> Path:
    """SPECCHAT_MODELS_DIR, else the config's `[models] dir`, else the platform data dir."""
    env = os.environ.get("SPECCHAT_MODELS_DIR")
    if env:
        return user_path(env)
    configured = (config or Config.load()).section("models").get("dir")
    if configured:
        return user_path(configured)
    return Path(platformdirs.user_data_dir(APP)) / "models"


def model_folders(config: Config | None = None) -> list[Path]:
    """The models dir first, then the folders the user added in the config."""
    config = config or Config.load()
    extra = [user_path(p) for p in config.section("models").get("folders", [])]
    return [models_dir(config), *extra]


def installed_path(model: CatalogModel, config: Config | None = None) -> Path | None:
    """Where a catalog model's file sits in the models folders, if anywhere."""
    for folder in model_folders(config):
        if (folder / model.file).is_file():
            return folder / model.file
    return None


def local_ggufs(config: Config | None = None) -> list[Path]:
    """GGUF files in the models folders and those registered with `specchat models add`."""
    config = config or Config.load()
    found: dict[Path, None] = {}
    for folder in model_folders(config):
        if folder.is_dir():
            for p in sorted(folder.glob("*.gguf")):
                found[p.resolve()] = None
    for p in config.section("models").get("files", []):
        path = user_path(p)
        if path.is_file():
            found[path.resolve()] = None
    return list(found)


def resolve_model(choice: str, role: str, catalog: Catalog | None = None,
                  config: Config | None = None) -> Path:
    """Turn a --target/--draft value into a GGUF path, or say what to do to get one."""
    catalog = catalog or Catalog.load()
    config = config or Config.load()
    name = catalog.pairs.get("default", {}).get(role) if choice == "default" else choice
    if name in catalog.models:
        path = installed_path(catalog.models[name], config)
        derived = derived_of(models_dir(config), name) if choice == "default" else None
        if derived is not None:
            return models_dir(config) / derived.file
        if path is not None:
            return path
        raise ModelNotInstalledError(
            f"model {name} is not installed; run `specchat models fetch {choice}`"
        )
    path = user_path(choice)
    if path.suffix == ".gguf" or path.exists() or os.sep in choice:
        return path
    for local in local_ggufs(config):
        if local.stem == choice:
            return local
    raise ModelFileError(
        f"unknown model {choice!r}: not a file, not in the catalog (see `specchat models list`)"
    )
