"""`ratchet campaign resume --set/--reshuffle`: recorded, applied to later rounds, accepted by the same-settings check."""

import json
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.flows.rounds.state.identity import CampaignConflict, check_same_settings
from ratchet.flows.rounds.state.resumed_settings import apply_recorded_settings, parse_set, with_settings
from ratchet.loop.campaign.round_context import campaign_id_of, load_ctx, save_config
from ratchet.loop.config import ConfigError, load_config
from ratchet.store.db import connect, init_db, transaction
from ratchet.store.events import campaign_events, recorded_settings
from ratchet.store.ingest import insert_rows
from ratchet.store.queries import campaign_controls

runner = CliRunner()


@pytest.fixture
def cfg(tmp_path):
    cfg = load_config(None, campaign="nightly", algorithm="grpo", db=str(tmp_path / "s.duckdb"), run_dir=str(tmp_path / "runs"))
    init_db(cfg.db)
    with transaction(cfg.db) as con:
        row = dict(
            campaign_id=campaign_id_of("nightly"),
            name="nightly",
            base_checkpoint_id="b",
            config_json=json.dumps(cfg.campaign_settings()),
            created_at=datetime.now(UTC).replace(tzinfo=None),
        )
        insert_rows(con, "campaigns", [row])
    return cfg


def _resume(cfg, *args):
    return runner.invoke(app, ["campaign", "resume", "nightly", "--reason", "lower lr", "--db", cfg.db, *args])


def test_resume_set_is_recorded_applied_and_accepted(cfg):
    r = _resume(cfg, "--set", "grpo.lr=3e-6")
    assert r.exit_code == 0, r.output
    assert "grpo.lr = 3e-06" in r.output and f"(was {cfg.grpo.lr!r})" in r.output
    with connect(cfg.db, read_only=True) as con:
        (event,) = campaign_events(con, campaign_id_of("nightly"))
        assert json.loads(event["settings_json"]) == {"set": {"grpo.lr": 3e-6}}
        # The old file config and the one carrying the change both continue the campaign ...
        check_same_settings(con, cfg)
        check_same_settings(con, with_settings(cfg, {"grpo.lr": 3e-6}))
        # ... but not another value, nor another setting.
        for other in ({"grpo.lr": 5e-6}, {"grpo.beta": 0.5}):
            with pytest.raises(CampaignConflict, match="grpo"):
                check_same_settings(con, with_settings(cfg, other))
        assert campaign_controls(con, ["nightly"])["nightly"]["events"][0]["changes"] == "grpo.lr=3e-06"
    status = runner.invoke(app, ["status", "--db", cfg.db])
    assert "(from round 1: grpo.lr=3e-06)" in " ".join(status.output.split()), status.output
    effective = load_ctx(apply_recorded_settings(str(save_config(cfg)))).cfg
    assert effective.grpo.lr == 3e-6 and effective.grpo.beta == cfg.grpo.beta


def test_reshuffle_draws_a_new_task_seed(cfg):
    assert _resume(cfg, "--reshuffle").exit_code == 0
    with connect(cfg.db, read_only=True) as con:
        seed = recorded_settings(con, campaign_id_of("nightly"))["tasks.seed"]
    assert isinstance(seed, int) and load_ctx(apply_recorded_settings(str(save_config(cfg)))).cfg.tasks.seed == seed


@pytest.mark.parametrize(
    "arg, msg",
    [
        ("grpo.lrr=1", "no setting 'lrr' in grpo"),
        ("grpo.lr=-1", "grpo.lr"),
        ("schedule.cron=x", "not a setting of this campaign"),
        ("grpo.lr", "not KEY=VALUE"),
    ],
)
def test_bad_set_gets_one_line_and_records_nothing(cfg, arg, msg):
    r = _resume(cfg, "--set", arg)
    assert r.exit_code != 0 and msg in r.output
    with connect(cfg.db, read_only=True) as con:
        assert campaign_events(con, campaign_id_of("nightly")) == []


def test_parse_set_reads_toml_values():
    assert parse_set(["a.b=3e-6", "c=gsm8k", "d=true", "e=[1, 2]"]) == {"a.b": 3e-6, "c": "gsm8k", "d": True, "e": [1, 2]}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_set(["=3"])
