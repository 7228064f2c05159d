"""[[phases]]: which phase a round is in, the config it runs with, what a bad phase says at load, the old key."""

import json

import pytest

from ratchet.loop.campaign.curriculum import phase_bounds, phase_label, phase_of
from ratchet.loop.campaign.round_context import Ctx, load_ctx, save_config
from ratchet.loop.config import ConfigError, RatchetConfig, load_config

PHASES = [
    {"name": "cold", "algorithm": "sft", "rounds": 1, "sft": {"lr": 1e-4}},
    {"name": "rl", "algorithm": "grpo", "rounds": 2, "grpo": {"beta": 0.01}, "generation": {"temperature": 1.1}},
    {"name": "rs", "algorithm": "rft", "rounds": 1, "tasks": {"levels": ["multi_step"]}},
]


def cfg(**kw) -> RatchetConfig:
    return RatchetConfig.model_validate({"phases": PHASES, "sft": {"epochs": 3}, **kw})


def test_round_boundaries_and_rounds_after_the_last_phase():
    c = cfg(max_rounds=7)
    got = [(r, phase_of(c, r)[0]) for r in range(1, 8)]
    assert got == [(1, 0), (2, 1), (3, 1), (4, 2), (5, 2), (6, 2), (7, 2)]  # past the end: the last phase
    assert phase_bounds(c) == [("cold", 1, 1), ("rl", 2, 3), ("rs", 4, 4)]
    assert [phase_label(c, r) for r in (1, 2, 4)] == ["cold", "rl", "rs"]
    with pytest.raises(ValueError, match="round_index \\(0\\) must be >= 1"):
        phase_of(c, 0)


def test_max_rounds_defaults_to_the_phases_total():
    assert cfg().max_rounds == 4
    assert cfg(max_rounds=2).max_rounds == 2
    assert RatchetConfig().max_rounds is None  # no phases: unlimited as before


def test_overrides_merge_key_by_key_over_the_campaign():
    c = cfg()
    _, cold = phase_of(c, 1)
    assert cold.algorithm == "sft" and cold.sft.lr == 1e-4 and cold.sft.epochs == 3  # epochs from the top level
    _, rl = phase_of(c, 3)
    assert rl.algorithm == "grpo" and rl.grpo.beta == 0.01 and rl.generation.temperature == 1.1
    assert rl.sft.lr == c.sft.lr and rl.generation.group_size == c.generation.group_size
    _, rs = phase_of(c, 4)
    assert rs.tasks.levels == ("multi_step",) and rs.generation.temperature == c.generation.temperature
    assert rl.phases == () and rl.campaign == c.campaign  # a phase's config does not nest phases


def test_no_phases_is_one_implicit_phase():
    c = RatchetConfig()
    assert phase_of(c, 5) == (None, c)
    assert "phases" not in c.campaign_settings()  # campaigns recorded before phases keep their settings
    assert cfg().campaign_settings()["phases"][0]["name"] == "cold"
    assert {"sft", "grpo"} <= cfg().campaign_settings().keys()  # both trainers are used by some phase


@pytest.mark.parametrize(
    "toml, msg",
    [
        ('[[phases]]\nalgorithm = "sft"\n[phases.sft]\nlrr = 1\n', r"phases\[0\] \(phase-1\): sft.lrr: Extra inputs"),
        ('[[phases]]\nalgorithm = "dpo"\n', r"phases\[0\]\.algorithm: Input should be 'sft', 'rft' or 'grpo' \(got 'dpo'\)"),
        ('[[phases]]\nalgorithm = "grpo"\n[phases.generation]\ngroup_size = 1\n', r"phases\[0\].*group_size \(1\) must be >= 2"),
        ('[[phases]]\nalgorithm = "rft"\n[phases.generation]\nmax_new_tokens = 64\n', r"max_new_tokens cap 64 differs"),
        ('[[phases]]\nalgorithm = "grpo"\n[phases.generation]\nteacher = "t"\n', r"phases\[0\].*teacher \('t'\) needs"),
        ('[[phases]]\nalgorithm = "rft"\nmodel = {name_or_path = "x"}\n', r"unknown config key phases\[0\]\.model; remove it"),
        ('[[phases]]\nname = "a"\nalgorithm = "rft"\n[[phases]]\nname = "a"\nalgorithm = "sft"\n', r"names \['a'\] appear"),
    ],
)
def test_a_bad_phase_fails_at_load_in_one_line(tmp_path, toml, msg):
    (tmp_path / "r.toml").write_text(toml)
    with pytest.raises(ConfigError, match=msg) as e:
        load_config(tmp_path / "r.toml")
    assert "\n" not in str(e.value)


def test_load_ctx_gives_each_round_its_phase_and_one_eval_set(tmp_path):
    path = save_config(cfg(db=str(tmp_path / "s.duckdb"), tasks={"heldout_prompts": 4, "train_prompts_per_round": 4}))
    c1, c2, c4 = (load_ctx(path, r) for r in (1, 2, 4))
    assert (c1.cfg.algorithm, c2.cfg.algorithm, c4.cfg.algorithm) == ("sft", "grpo", "rft")
    assert (c1.phase_name, c2.phase_name, c4.phase_name) == ("cold", "rl", "rs")
    assert load_ctx(path).cfg.phases and load_ctx(path).phase_name is None  # round 0: the campaign itself
    # Phase 3 draws its training prompts from other levels, yet the eval set (prompts, rendering, id) is the campaign's.
    assert c4.eval_set_id() == c1.eval_set_id() == Ctx(json_cfg(path)).eval_set_id()
    assert [c4.messages(p) for p in c4.heldout()] == [c1.messages(p) for p in c1.heldout()]
    assert all(p.task == "multi_step" for p in c4.train_prompts())
    assert c2.at_step(1).cfg == c2.cfg and c2.at_step(1).phase_name == "rl"


def json_cfg(path) -> RatchetConfig:
    return RatchetConfig.model_validate(json.loads(path.read_text()))


def test_every_phase_config_has_campaign_settings():
    c = cfg()
    for r in (1, 2, 4):  # sft, grpo (its sft section left out), rft (its grpo section left out)
        settings = phase_of(c, r)[1].campaign_settings()
        assert ("sft" in settings) == (r != 2) and ("grpo" in settings) == (r == 2)


def test_rollout_temperature_default_is_per_algorithm_and_per_phase():
    assert RatchetConfig(algorithm="rft").rollout_temperature == 0.8
    assert RatchetConfig(algorithm="grpo").rollout_temperature == 1.2
    assert RatchetConfig.model_validate({"algorithm": "grpo", "generation": {"temperature": 0.8}}).rollout_temperature == 0.8
    c = RatchetConfig.model_validate({"phases": PHASES[:1] + [{**PHASES[1], "generation": {}}] + PHASES[2:]})
    assert [phase_of(c, r)[1].rollout_temperature for r in (1, 2, 4)] == [0.8, 1.2, 0.8]  # each phase its algorithm's
    assert phase_of(cfg(), 2)[1].rollout_temperature == 1.1  # a phase's own value wins
    # an rft campaign recorded before the default moved (0.8 written out) has the same settings; a grpo one does not
    assert RatchetConfig(algorithm="rft").campaign_settings()["generation"]["temperature"] == 0.8
    assert RatchetConfig(algorithm="grpo").campaign_settings()["generation"]["temperature"] == 1.2


def test_the_old_key_stages_loads_as_phases_with_a_notice(tmp_path, caplog):
    """A config written with ``[[stages]]`` loads as ``[[phases]]``; one notice line names the new key."""
    (tmp_path / "r.toml").write_text('[[stages]]\nname = "cold"\nalgorithm = "sft"\n[[stages]]\nalgorithm = "rft"\nrounds = 2\n')
    with caplog.at_level("WARNING"):
        c = load_config(tmp_path / "r.toml")
    assert [(s.name, s.algorithm, s.rounds) for s in c.phases] == [("cold", "sft", 1), (None, "rft", 2)]
    assert c.max_rounds == 3 and c.phase_name(1) == "phase-2"
    notices = [r.getMessage() for r in caplog.records if "[[stages]]" in r.getMessage()]
    assert len(notices) == 1 and "[[phases]]" in notices[0] and "\n" not in notices[0]
    both = '[[stages]]\nalgorithm = "sft"\n[[phases]]\nalgorithm = "rft"\n'
    (tmp_path / "b.toml").write_text(both)
    with pytest.raises(ConfigError, match=r"\[\[stages\]\] and \[\[phases\]\] are both set"):
        load_config(tmp_path / "b.toml")


def test_a_saved_config_with_stages_still_runs_its_phases(tmp_path):
    """A run directory's saved config written before the rename (key ``stages``) gives each round its phase."""
    path = save_config(cfg(db=str(tmp_path / "s.duckdb")))
    old = json.loads(path.read_text())
    old["stages"] = old.pop("phases")
    path.write_text(json.dumps(old))
    assert [load_ctx(path, r).phase_name for r in (1, 2, 4)] == ["cold", "rl", "rs"]
