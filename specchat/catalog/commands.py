"""`specchat models list|fetch|verify|add|check`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from specchat.catalog import compat
from specchat.catalog.catalog import Catalog, installed_path, local_ggufs, models_dir, resolve_model
from specchat.catalog.fetch import fetch_model, sha256_file
from specchat.catalog.layout import QUALITY_TOKENS, load_derived
from specchat.config import Config
from specchat.errors import ModelFileError, SpecchatError
from specchat.tables import table_console


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("models", help="list, fetch, verify, add and check models")
    msub = p.add_subparsers(dest="models_command", required=True)
    msub.add_parser("list", help="installed and catalog models, and which pairs can speculate")
    f = msub.add_parser("fetch", help="fetch a catalog model (or 'default': the default pair)")
    f.add_argument("name")
    msub.add_parser("verify", help="re-hash installed catalog models")
    a = msub.add_parser("add", help="register a local GGUF file")
    a.add_argument("path")
    c = msub.add_parser("check", help="can DRAFT draft for TARGET, and if not, why")
    c.add_argument("target")
    c.add_argument("draft")
    pth = msub.add_parser("path", help="the file of a model, for scripts and llama.cpp's own "
                                       "tools")
    pth.add_argument("name", help="a catalog name, a GGUF name or file, 'default' (the default "
                                  "pair's target, in the layout `default` loads) or 'draft' "
                                  "(its draft)")
    o = msub.add_parser("optimize", help="re-lay a model for this CPU's llama.cpp kernels (made "
                                         "beside the original, measured against it)")
    o.add_argument("name", nargs="?", default="default",
                   help="a catalog name, a GGUF file, or 'default' (both models of the default "
                        "pair; the default)")
    o.add_argument("--force", action="store_true", help="make it again even if it exists")
    o.add_argument("--quality-tokens", type=int, default=QUALITY_TOKENS,
                   help="tokens of each greedy reply compared for a target (default: %(default)s)")
    o.add_argument("--threads", type=int, default=None,
                   help="CPU threads for the timing (default: one per free physical core)")
    return p


def _where(path: Path | None, config: Config) -> str:
    if path is None:
        return "[dim]not installed[/]"
    return "models dir" if path.parent == models_dir(config) else str(path)


def _progress_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        TimeRemainingColumn(), console=console, transient=False,
    )


def cmd_fetch(name: str, console: Console, config: Config) -> int:
    catalog = Catalog.load()
    if name == "default":
        targets = catalog.pair_models("default")
    elif name in catalog.models:
        targets = [catalog.models[name]]
    else:
        raise SpecchatError(f"no catalog model named {name!r}; see `specchat models list`")
    dest = models_dir(config)
    for model in targets:
        installed = installed_path(model, config)
        if installed is not None and installed.stat().st_size == model.size:
            console.print(f"[green]ok[/] {model.name} already installed → {installed} "
                          "(`specchat models verify` re-hashes it)")
            continue
        with _progress_bar(console) as bar:
            task = bar.add_task(model.name, total=model.size)

            def progress(stage: str, done: int, total: int, task=task, name=model.name) -> None:
                bar.update(task, description=f"{name} ({stage})", completed=done, total=total)

            path = fetch_model(model, dest, progress, note=lambda m: bar.console.print(f"  {m}"))
        console.print(f"[green]ok[/] {model.name} → {path}")
    return 0


def cmd_verify(console: Console, config: Config) -> int:
    """Re-hash the installed catalog models and the ones `models optimize` made."""
    bad = 0
    dest = models_dir(config)
    expected = [(m.name, installed_path(m, config), m.sha256) for m in Catalog.load().models.values()]
    expected += [(r.name, dest / r.file if (dest / r.file).is_file() else None, r.sha256)
                 for r in load_derived(dest).values()]
    for name, path, sha256 in expected:
        if path is None:
            continue
        digest = sha256_file(path)
        if digest == sha256:
            console.print(f"[green]ok[/] {name} {path}")
        else:
            bad += 1
            console.print(f"[red]MISMATCH[/] {name} {path}\n  expected {sha256}\n"
                          f"  actual   {digest}")
    return 1 if bad else 0


def cmd_add(path_text: str, console: Console, config: Config) -> int:
    try:
        path = Path(path_text).expanduser().resolve()
    except (OSError, ValueError, RuntimeError) as exc:  # NUL byte, unknown ~user, too long
        raise ModelFileError(f"not a usable path: {path_text!r} ({exc})") from None
    info = compat.header(path)  # raises a clear error for a bad file
    files = config.data.setdefault("models", {}).setdefault("files", [])
    if str(path) not in files:
        files.append(str(path))
        config.save()
    console.print(f"added {path.name}: {info.architecture}, {info.quantization}, "
                  f"{len(info.tokens)} tokens ({config.path})")
    return 0


def cmd_check(target: str, draft: str, console: Console) -> int:
    from specchat.catalog.catalog import resolve_model

    verdict = compat.check(resolve_model(target, "target"), resolve_model(draft, "draft"))
    mark = "[green]compatible[/]" if verdict.ok else "[red]incompatible[/]"
    console.print(f"{mark}: {verdict.reason}")
    return 0 if verdict.ok else 1


def cmd_list(console: Console, config: Config) -> int:
    catalog = Catalog.load()
    table = Table(title=f"models (folder: {models_dir(config)})")
    table.add_column("name", no_wrap=True)
    for col in ("params", "quant", "size"):
        table.add_column(col, no_wrap=True)
    table.add_column("where", overflow="fold")
    rows: list[tuple[str, Path]] = []
    catalog_files = set()
    for model in catalog.models.values():
        path = installed_path(model, config)
        catalog_files.add(model.file)
        table.add_row(model.name, model.params, model.quant, f"{model.size / 1e6:.0f} MB",
                      _where(path, config))
        if path:
            rows.append((model.name, path))
    for path in local_ggufs(config):
        if path.name in catalog_files:
            continue
        try:
            info = compat.header(path)
        except ModelFileError as exc:
            table.add_row(path.stem, "", "", "", f"[red]{exc}[/]")
            continue
        table.add_row(path.stem, "", info.quantization, f"{info.file_size / 1e6:.0f} MB",
                      _where(path, config))
        rows.append((path.stem, path))
    console.print(table)
    if len(rows) > 1:
        pairs = Table(title="can draft for (from GGUF headers)")
        pairs.add_column("target", overflow="fold")
        pairs.add_column("draft", overflow="fold")
        pairs.add_column("verdict", overflow="fold")
        for t_name, t_path in rows:
            for d_name, d_path in rows:
                if t_path == d_path or t_path.stat().st_size < d_path.stat().st_size:
                    continue
                v = compat.check(t_path, d_path)
                pairs.add_row(t_name, d_name, "[green]yes[/]" if v.ok else f"[red]no[/]: {v.reason}")
        console.print(pairs)
    return 0


def cmd_path(name: str, config: Config) -> int:
    """Print the model's file (absolute, nothing else on stdout) in a form llama.cpp's own
    tools load: where `default` loads a copy only specchat's llama.cpp can (a draft made by
    `models optimize`), the file it was made from, and a line on stderr saying so."""
    from specchat.catalog.gguf_file import needs_specchat_llama
    from specchat.catalog.layout import load_derived

    role = "draft" if name == "draft" else "target"
    path = resolve_model("default" if name in ("default", "draft") else name, role,
                         config=config)
    if not path.is_file():
        raise ModelFileError(f"{name}: no such model file {path}")
    if needs := needs_specchat_llama(path):
        record = next((d for d in load_derived(models_dir(config)).values()
                       if d.file == path.name), None)
        original = models_dir(config) / record.source_file if record else None
        if original is not None and original.is_file():
            print(f"{path.name} needs specchat's build of llama.cpp ({needs}); the file it was "
                  f"made from, which any llama.cpp loads: {original.name}", file=sys.stderr)
            path = original
        else:
            print(f"{path.name} needs specchat's build of llama.cpp ({needs}): llama.cpp's own "
                  "tools cannot load it", file=sys.stderr)
    print(path.resolve())
    return 0


def run(args: argparse.Namespace) -> int:
    console = table_console()
    config = Config.load()  # a broken file was reported by the command line already
    match args.models_command:
        case "list":
            return cmd_list(console, config)
        case "fetch":
            return cmd_fetch(args.name, console, config)
        case "verify":
            return cmd_verify(console, config)
        case "add":
            return cmd_add(args.path, console, config)
        case "check":
            return cmd_check(args.target, args.draft, console)
        case "path":
            return cmd_path(args.name, config)
    raise SpecchatError(f"unknown models command {args.models_command}")
