"""[[stages]]: which stage a round is in, the config it runs with, and what a bad stage says at load."""

import json

import pytest

from ratchet.loop.campaign.context import Ctx, load_ctx, save_config
from ratchet.loop.campaign.curriculum import stage_bounds, stage_label, stage_of
from ratchet.loop.config import ConfigError, RatchetConfig, load_config

STAGES = [
    {"name": "cold", "algorithm": "sft", "rounds": 1, "sft": {"lr": 1e-4}},
    {"name": "rl", "algorithm": "grpo", "rounds": 2, "grpo": {"beta": 0.01}, "generation": {"temperature": 1.1}},
    {"name": "rs", "algorithm": "rft", "rounds": 1, "tasks": {"levels": ["multi_step"]}},
]


def cfg(**kw) -> RatchetConfig:
    return RatchetConfig.model_validate({"stages": STAGES, "sft": {"epochs": 3}, **kw})


def test_round_boundaries_and_rounds_after_the_last_stage():
    c = cfg(max_rounds=7)
    got = [(r, stage_of(c, r)[0]) for r in range(1, 8)]
    assert got == [(1, 0), (2, 1), (3, 1), (4, 2), (5, 2), (6, 2), (7, 2)]  # past the end: the last stage
    assert stage_bounds(c) == [("cold", 1, 1), ("rl", 2, 3), ("rs", 4, 4)]
    assert [stage_label(c, r) for r in (1, 2, 4)] == ["cold", "rl", "rs"]
    with pytest.raises(ValueError, match="round_index \\(0\\) must be >= 1"):
        stage_of(c, 0)


def test_max_rounds_defaults_to_the_stages_total():
    assert cfg().max_rounds == 4
    assert cfg(max_rounds=2).max_rounds == 2
    assert RatchetConfig().max_rounds is None  # no stages: unlimited as before


def test_overrides_merge_key_by_key_over_the_campaign():
    c = cfg()
    _, cold = stage_of(c, 1)
    assert cold.algorithm == "sft" and cold.sft.lr == 1e-4 and cold.sft.epochs == 3  # epochs from the top level
    _, rl = stage_of(c, 3)
    assert rl.algorithm == "grpo" and rl.grpo.beta == 0.01 and rl.generation.temperature == 1.1
    assert rl.sft.lr == c.sft.lr and rl.generation.group_size == c.generation.group_size
    _, rs = stage_of(c, 4)
    assert rs.tasks.levels == ("multi_step",) and rs.generation.temperature == c.generation.temperature
    assert rl.stages == () and rl.campaign == c.campaign  # a stage's config does not nest stages


def test_no_stages_is_one_implicit_stage():
    c = RatchetConfig()
    assert stage_of(c, 5) == (None, c)
    assert "stages" not in c.campaign_settings()  # campaigns recorded before stages keep their settings
    assert cfg().campaign_settings()["stages"][0]["name"] == "cold"
    assert {"sft", "grpo"} <= cfg().campaign_settings().keys()  # both trainers are used by some stage


@pytest.mark.parametrize(
    "toml, msg",
    [
        ('[[stages]]\nalgorithm = "sft"\n[stages.sft]\nlrr = 1\n', r"stages\[0\] \(stage-1\): sft.lrr: Extra inputs"),
        ('[[stages]]\nalgorithm = "dpo"\n', r"stages\[0\]\.algorithm: Input should be 'sft', 'rft' or 'grpo' \(got 'dpo'\)"),
        ('[[stages]]\nalgorithm = "grpo"\n[stages.generation]\ngroup_size = 1\n', r"stages\[0\].*group_size \(1\) must be >= 2"),
        ('[[stages]]\nalgorithm = "rft"\n[stages.generation]\nmax_new_tokens = 64\n', r"max_new_tokens cap 64 differs"),
        ('[[stages]]\nalgorithm = "grpo"\n[stages.generation]\nteacher = "t"\n', r"stages\[0\].*teacher \('t'\) needs"),
        ('[[stages]]\nalgorithm = "rft"\nmodel = {name_or_path = "x"}\n', r"unknown config key stages\[0\]\.model; remove it"),
        ('[[stages]]\nname = "a"\nalgorithm = "rft"\n[[stages]]\nname = "a"\nalgorithm = "sft"\n', r"names \['a'\] appear"),
    ],
)
def test_a_bad_stage_fails_at_load_in_one_line(tmp_path, toml, msg):
    (tmp_path / "r.toml").write_text(toml)
    with pytest.raises(ConfigError, match=msg) as e:
        load_config(tmp_path / "r.toml")
    assert "\n" not in str(e.value)


def test_load_ctx_gives_each_round_its_stage_and_one_eval_set(tmp_path):
    path = save_config(cfg(db=str(tmp_path / "s.duckdb"), tasks={"heldout_prompts": 4, "train_prompts_per_round": 4}))
    c1, c2, c4 = (load_ctx(path, r) for r in (1, 2, 4))
    assert (c1.cfg.algorithm, c2.cfg.algorithm, c4.cfg.algorithm) == ("sft", "grpo", "rft")
    assert (c1.curriculum_stage, c2.curriculum_stage, c4.curriculum_stage) == ("cold", "rl", "rs")
    assert load_ctx(path).cfg.stages and load_ctx(path).curriculum_stage is None  # round 0: the campaign itself
    # Stage 3 draws its training prompts from other levels, yet the eval set (prompts, rendering, id) is the campaign's.
    assert c4.eval_set_id() == c1.eval_set_id() == Ctx(json_cfg(path)).eval_set_id()
    assert [c4.messages(p) for p in c4.heldout()] == [c1.messages(p) for p in c1.heldout()]
    assert all(p.task == "multi_step" for p in c4.train_prompts())
    assert c2.at_step(1).cfg == c2.cfg and c2.at_step(1).curriculum_stage == "rl"


def json_cfg(path) -> RatchetConfig:
    return RatchetConfig.model_validate(json.loads(path.read_text()))


def test_every_stage_config_has_campaign_settings():
    c = cfg()
    for r in (1, 2, 4):  # sft, grpo (its sft section left out), rft (its grpo section left out)
        settings = stage_of(c, r)[1].campaign_settings()
        assert ("sft" in settings) == (r != 2) and ("grpo" in settings) == (r == 2)


def test_rollout_temperature_default_is_per_algorithm_and_per_stage():
    assert RatchetConfig(algorithm="rft").rollout_temperature == 0.8
    assert RatchetConfig(algorithm="grpo").rollout_temperature == 1.2
    assert RatchetConfig.model_validate({"algorithm": "grpo", "generation": {"temperature": 0.8}}).rollout_temperature == 0.8
    c = RatchetConfig.model_validate({"stages": STAGES[:1] + [{**STAGES[1], "generation": {}}] + STAGES[2:]})
    assert [stage_of(c, r)[1].rollout_temperature for r in (1, 2, 4)] == [0.8, 1.2, 0.8]  # each stage its algorithm's
    assert stage_of(cfg(), 2)[1].rollout_temperature == 1.1  # a stage's own value wins
    # an rft campaign recorded before the default moved (0.8 written out) has the same settings; a grpo one does not
    assert RatchetConfig(algorithm="rft").campaign_settings()["generation"]["temperature"] == 0.8
    assert RatchetConfig(algorithm="grpo").campaign_settings()["generation"]["temperature"] == 1.2
