"""`ratchet up --work-pool` without a server: the flag and `[schedule] work_pool` reach every campaign, the daemon
checks only the schedule of a work pool's campaign (its store is the worker's), and the worker's flow run checks and
saves the config it carries. The deployment and a real worker's round: tests/e2e/test_work_pool.py."""

import json

import pytest

from ratchet.flows.daemon.service import prepare_campaigns
from ratchet.flows.rounds.campaign import worker_config
from ratchet.loop.checkpoints import ModelError
from ratchet.loop.config import ConfigError, load_daemon_config
from tests.flows.rounds.test_round import write_sum_tasks


def _toml(tmp_path, tiny_model_dir, extra: str = "") -> object:
    toml = tmp_path / "r.toml"
    toml.write_text(
        f'db = "{tmp_path / "store" / "r.duckdb"}"\nrun_dir = "{tmp_path / "runs"}"\n[model]\nname_or_path = "{tiny_model_dir}"\n'
        f'[tasks]\nsource = "jsonl"\npath = "{write_sum_tasks(tmp_path)}"\nheldout_fraction = 0.3\nfewshot = 0\n'
        'system_prompt = "sys"\ntrain_prompts_per_round = 12\nheldout_prompts = 10\n[generation]\nmax_new_tokens = 6\n'
        '[[campaigns]]\ncampaign = "a"\n[[campaigns]]\ncampaign = "b"\n' + extra
    )
    return toml


def test_the_flag_sets_every_campaigns_pool_and_the_config_one_campaigns(tmp_path, tiny_model_dir):
    toml = _toml(tmp_path, tiny_model_dir)
    assert [c.schedule.work_pool for c in load_daemon_config(toml).campaigns] == [None, None]
    assert [c.schedule.work_pool for c in load_daemon_config(toml, work_pool="gpu").campaigns] == ["gpu", "gpu"]
    toml.write_text(toml.read_text() + '[campaigns.schedule]\nwork_pool = "gpu"\n')  # only campaign b
    assert [c.schedule.work_pool for c in load_daemon_config(toml).campaigns] == [None, "gpu"]
    toml.write_text(toml.read_text().replace('work_pool = "gpu"', 'work_pool = ""'))
    with pytest.raises(ConfigError, match="work_pool"):
        load_daemon_config(toml)


def test_the_daemon_leaves_a_pools_store_to_the_worker_whose_flow_run_checks_and_saves_the_config(tmp_path, tiny_model_dir):
    dcfg = load_daemon_config(_toml(tmp_path, tiny_model_dir), work_pool="gpu")
    (a, a_path), (b, _) = prepare_campaigns(dcfg)
    assert not (tmp_path / "store").exists() and not a_path.exists()  # nothing opened or written on the daemon's side
    assert a_path == tmp_path / "runs" / "a" / "config.json" and a.db == str(tmp_path / "store" / "r.duckdb")

    saved = worker_config(a.model_dump(mode="json"))  # what the worker's flow run does first
    assert saved == a_path and json.loads(saved.read_text())["campaign"] == "a"
    assert (tmp_path / "store" / "r.duckdb").exists()  # preflight created the store, on the worker

    with pytest.raises(ConfigError, match="the deployment's config is not valid here"):
        worker_config({**b.model_dump(mode="json"), "max_rounds": "many"})
    gone = {**b.model_dump(mode="json"), "model": {**b.model_dump(mode="json")["model"], "name_or_path": str(tmp_path / "nope")}}
    with pytest.raises(ModelError, match="nope"):  # preflight's own error, before any round starts
        worker_config(gone)
