"""Sweep grids: parsing, expansion, deterministic names, validated per-point configs; recipe config knobs from TOML."""

from __future__ import annotations

import pytest

from ratchet.loop.campaign.sweep import expand, parse_grid, point_name, sweep_configs
from ratchet.loop.config import ConfigError, load_config
from ratchet.loop.config.template import render_default_toml


def test_parse_grid_reads_toml_values():
    assert parse_grid("grpo.beta=0.001,0.003, 0.01") == ("grpo.beta", [0.001, 0.003, 0.01])
    assert parse_grid("generation.group_size=4,8") == ("generation.group_size", [4, 8])
    assert parse_grid("grpo.advantage=rloo,dr_grpo") == ("grpo.advantage", ["rloo", "dr_grpo"])
    assert parse_grid("eval.greedy=true,false")[1] == [True, False]


@pytest.mark.parametrize("spec", ["grpo.beta", "=1,2", "grpo.beta=", "grpo.beta=1,,2", "grpo.beta=1,1"])
def test_bad_grid_specs_show_the_form(spec):
    with pytest.raises(ConfigError, match="--grid"):
        parse_grid(spec)


def test_expand_is_the_product_first_grid_outermost():
    pts = expand([("a", [1, 2]), ("b", ["x", "y", "z"])])
    assert pts == [{"a": a, "b": b} for a in (1, 2) for b in ("x", "y", "z")]
    with pytest.raises(ConfigError, match="given twice"):
        expand([("a", [1]), ("a", [2])])
    with pytest.raises(ConfigError, match="at least one --grid"):
        expand([])


def test_names_are_deterministic_and_say_the_point():
    assert point_name("arith", {"grpo.beta": 0.001, "generation.group_size": 4}) == "arith-beta0.001-g4"
    assert point_name("arith", {"grpo.beta": 1e-05}) == "arith-beta1e-05"
    assert point_name("arith", {"tasks.system_prompt": "a b/c"}) == "arith-system_prompta_b_c"
    with pytest.raises(ConfigError, match="longer than 64"):
        point_name("x" * 60, {"grpo.beta": 0.001})


def test_sweep_configs_apply_each_point():
    base = load_config(None, campaign="kl", algorithm="grpo")
    out = sweep_configs(base, ["grpo.beta=0.001,0.003,0.01,0.03", "generation.group_size=4,8"])
    assert len(out) == 8
    assert [c.campaign for _, c in out][:2] == ["kl-beta0.001-g4", "kl-beta0.001-g8"]
    assert {(c.grpo.beta, c.generation.group_size) for _, c in out} == {
        (b, g) for b in (0.001, 0.003, 0.01, 0.03) for g in (4, 8)
    }
    assert all(c.sft == base.sft and c.algorithm == "grpo" for _, c in out)


@pytest.mark.parametrize(
    "spec, match",
    [
        ("grpo.betta=0.1", "'betta' is not a key of \\[grpo\\]"),
        ("nosuch.beta=0.1", "'nosuch' is not a config section"),
        ("grpo.beta=-1", "config value grpo.beta"),
        ("generation.group_size=1", "group_size \\(1\\) must be >= 2"),
    ],
)
def test_bad_points_fail_before_anything_runs(spec, match):
    with pytest.raises(ConfigError, match=match):
        sweep_configs(load_config(None, algorithm="grpo"), [spec])


def test_recipe_knobs_in_toml_and_init_template(tmp_path):
    p = tmp_path / "r.toml"
    p.write_text('[verifier]\nlanguage_weight = 0.1\ntarget_language = "zh"\nlean_url = "http://lean:8000"\n')
    v = load_config(p).verifier
    assert (v.language_weight, v.target_language, v.lean_url) == (0.1, "zh", "http://lean:8000")
    text = render_default_toml()
    for key in ("language_weight = 0.0", 'target_language = "none"', "lean_url = ", "lean_timeout_s = 60.0"):
        assert key in text


def test_new_verifier_knobs_at_default_leave_campaign_settings_unchanged():
    assert set(load_config(None).campaign_settings()["verifier"]) == {
        "format_template",
        "format_weight",
        "timeout_s",
        "code_isolation",
    }
    on = load_config(None, **{"verifier.language_weight": 0.2, "verifier.target_language": "en"}).campaign_settings()
    assert on["verifier"]["language_weight"] == 0.2
