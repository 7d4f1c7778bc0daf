"""The one settings schema: CLI flags, the config file's [engine] section and the settings form
are all made from it, so a value goes through each of them and comes back the same."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specchat import settings as schema
from specchat.cli import build_parser
from specchat.settings import DraftOptions, ModelOptions, SamplingOptions, Settings

optional_int = st.none() | st.integers(0, 200)
form_settings = st.builds(
    Settings,
    models=st.builds(ModelOptions, target_gpu_layers=optional_int, draft_gpu_layers=optional_int),
    draft=st.builds(DraftOptions, policy=st.sampled_from(schema.POLICIES), k=st.integers(1, 16),
                    n_min=st.integers(0, 8), p_min=st.floats(0, 1), tree=st.booleans(),
                    tree_nodes=st.integers(1, 15), tree_p=st.floats(0, 1)),
    sampling=st.builds(SamplingOptions, temperature=st.floats(0, 4), top_k=st.integers(0, 500),
                       top_p=st.floats(0, 1), seed=st.none() | st.integers(0, 2**32),
                       max_tokens=st.integers(1, 4096),
                       context_policy=st.sampled_from(schema.CONTEXT_POLICIES)),
)


@given(form_settings)
def test_config_and_form_round_trip_every_value(settings):
    loaded, problems = schema.from_config(settings.saved())
    assert problems == [] and loaded == settings
    as_text = {f.name: "" if (v := getattr(getattr(settings, s), f.name)) is None else str(v)
               for s, f in schema.form_fields()}
    assert schema.from_form(Settings(), as_text) == settings


@given(form_settings)
def test_the_config_file_becomes_the_cli_defaults(settings):
    args = build_parser(settings).parse_args(["ask", "hi"])
    assert schema.from_args(args) == settings


def test_flags_override_and_a_bad_config_value_is_reported_not_used():
    defaults, problems = schema.from_config({"k": "many", "seed": 5, "policy": "sometimes"})
    assert defaults.draft.k == DraftOptions().k and defaults.sampling.seed == 5
    assert len(problems) == 2 and any("draft length k" in p for p in problems)
    args = build_parser(defaults).parse_args(
        ["ask", "hi", "--k", "6", "--policy", "adaptive", "--ctx", "512", "--stop", "a",
         "--stop", "b", "--target-gpu-layers", "0"])
    s = schema.from_args(args)
    assert (s.draft.k, s.draft.engine().policy_kind == "adaptive", s.models.n_ctx) == (6, True, 512)
    assert s.sampling.stop == ["a", "b"] and s.models.target_gpu_layers == 0
    assert s.sampling.seed == 5 and Settings().sampling.stop == []


def test_values_out_of_range_are_reported_and_not_used():
    bad = {"k": 0, "temperature": float("nan"), "top_p": 1.5, "max_tokens": -3, "seed": -1,
           "context_policy": "forget"}
    loaded, problems = schema.from_config(bad)
    assert loaded == Settings() and len(problems) == len(bad)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["ask", "hi", "--k", "0"])


def test_an_empty_form_field_is_the_default_and_a_bad_one_names_the_field():
    cleared = schema.from_form(Settings(sampling=SamplingOptions(seed=3)), {"seed": " "})
    assert cleared.sampling.seed is None and cleared.draft.k == DraftOptions().k
    with pytest.raises(ValueError, match="top-p: 'x' is not valid"):
        schema.from_form(Settings(), {"top_p": "x"})


def test_tree_is_a_switch_in_flags_form_and_config():
    """--tree and --no-tree, on/off in the form, true/false in the config file; anything else
    is refused and named. The engine then drafts trees of the shape asked for."""
    args = build_parser(Settings()).parse_args(["ask", "--tree", "--tree-nodes", "6", "hi"])
    settings = schema.from_args(args)
    assert settings.draft.tree and settings.draft.engine().tree is not None
    assert settings.draft.engine().tree.nodes == 6
    assert schema.from_args(build_parser(settings).parse_args(["ask", "--no-tree", "hi"])
                            ).draft.engine().tree is None
    assert schema.from_form(Settings(), {"tree": "on"}).draft.tree
    assert not schema.from_form(Settings(), {"tree": "off"}).draft.tree
    with pytest.raises(ValueError, match="draft trees"):
        schema.from_form(Settings(), {"tree": "maybe"})
    loaded, problems = schema.from_config({"tree": "yes"})
    assert problems and not loaded.draft.tree  # a string in TOML is not a switch
    loaded, problems = schema.from_config({"tree": True, "k": True})
    assert loaded.draft.tree and len(problems) == 1 and "k" in problems[0]
