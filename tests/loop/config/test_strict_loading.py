"""Config loading a newcomer can trust (issue 24, finding 6): strict numbers and booleans, every error at once with
its place and a "did you mean", task paths relative to the config file."""

import pytest

from ratchet.loop.config import ConfigError, load_config


@pytest.mark.parametrize(
    "toml,msg",
    [
        ('[sft]\nlr = "3e-5"\n', "config value sft.lr: must be a number, not the text '3e-5'; write it without quotes"),
        ('[generation]\nmax_new_tokens = "64"\n', "generation.max_new_tokens: must be a number or 'auto', not the text '64'"),
        ("[generation]\ngroup_size = true\n", "generation.group_size: must be a number, not true"),
        ('[compute]\nfsdp = "yes"\n', "must be true or false, not the text 'yes'"),
        ('[[tasks.sources]]\npath = "a.jsonl"\nfewshot = "2"\n', "tasks.sources[0].fewshot: must be a number"),
    ],
)
def test_numbers_and_booleans_are_strict(tmp_path, toml, msg):
    (tmp_path / "r.toml").write_text(toml)
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "r.toml")
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_every_error_at_once_with_did_you_mean(tmp_path):
    (tmp_path / "r.toml").write_text(
        '[generation]\ntemprature = 0.5\ngroup_size = 0\n[sft]\nlr = "x"\n[tasks]\nheldot_prompts = 3\n'
    )
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "r.toml")
    text = str(e.value)
    assert text.startswith("4 config errors")
    assert "unknown config key generation.temprature; did you mean 'generation.temperature'?" in text
    assert "unknown config key tasks.heldot_prompts; did you mean 'tasks.heldout_prompts'?" in text
    assert "generation.group_size" in text and "sft.lr: must be a number" in text


def test_good_values_still_load(tmp_path):
    (tmp_path / "r.toml").write_text('[sft]\nlr = 1\n[generation]\nmax_new_tokens = "auto"\ntemperature = 1\n')
    cfg = load_config(tmp_path / "r.toml")
    assert cfg.sft.lr == 1.0 and cfg.generation.max_new_tokens == "auto"


def test_relative_task_paths_follow_the_config_file(tmp_path, monkeypatch):
    conf = tmp_path / "project"
    conf.mkdir()
    (conf / "r.toml").write_text(
        '[tasks]\n[[tasks.sources]]\npath = "s.jsonl"\nfewshot_path = "shots.jsonl"\n'
        '[[evals]]\nname = "e"\n[evals.file]\npath = "../e.jsonl"\n'
    )
    (conf / "old.toml").write_text('[tasks]\nsource = "jsonl"\npath = "data/t.jsonl"\n')
    monkeypatch.chdir(tmp_path)  # not the config's folder
    cfg = load_config("project/r.toml")
    assert load_config("project/old.toml").tasks.sources[0].path == str(conf / "data" / "t.jsonl")  # the old key, folded
    assert cfg.tasks.sources[0].path == str(conf / "s.jsonl") and cfg.tasks.sources[0].fewshot_path == str(conf / "shots.jsonl")
    assert cfg.evals[0].file.path == str(tmp_path / "e.jsonl")
