"""Daemon config: `ratchet init`'s file, several campaigns in one file, schedules, the [prefect] section."""

import tomllib

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.loop.config import ConfigError, PrefectConfig, RatchetConfig, ScheduleConfig, load_config, load_daemon_config
from ratchet.loop.config.template import render_default_toml

runner = CliRunner()


def _leaf_keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    out = set()
    for name, info in model.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out |= _leaf_keys(ann, f"{prefix}{name}.")
        else:
            out.add(prefix + name)
    return out


def test_init_writes_every_key_and_loads_back_to_the_defaults(tmp_path):
    path = tmp_path / "ratchet.toml"
    r = runner.invoke(app, ["init", "--path", str(path)])
    assert r.exit_code == 0, r.output
    text = path.read_text()
    assert load_config(path) == RatchetConfig()
    d = load_daemon_config(path)
    assert d.prefect == PrefectConfig() and d.campaigns == (RatchetConfig(),)
    # every key appears, set to its default or (unset by default) commented out
    data = tomllib.loads(text)
    for key in _leaf_keys(RatchetConfig) | {f"prefect.{k}" for k in PrefectConfig.model_fields}:
        *parents, leaf = key.split(".")
        node = data
        for p in parents:
            node = node[p]
        assert leaf in node or f"\n# {leaf} =\n" in text, key
    # field descriptions are the comments
    assert "# " + RatchetConfig.model_fields["max_rounds"].description in text
    assert "One of: score, bootstrap, mcnemar." in text.replace("\n# ", " ")


def test_init_refuses_to_overwrite_without_force(tmp_path):
    path = tmp_path / "ratchet.toml"
    path.write_text("campaign = 'mine'\n")
    r = runner.invoke(app, ["init", "--path", str(path)])
    assert r.exit_code == 2 and "already exists" in r.stderr and "--force" in r.stderr
    assert path.read_text() == "campaign = 'mine'\n"
    assert runner.invoke(app, ["init", "--path", str(path), "--force"]).exit_code == 0
    assert load_config(path) == RatchetConfig()


MULTI = """
db = "shared.duckdb"
max_rounds = 5
[sft]
lr = 1e-4
epochs = 3
[schedule]
cron = "30 1 * * *"
timezone = "Europe/Berlin"
[prefect]
port = 4300

[[campaigns]]
campaign = "a"

[[campaigns]]
campaign = "b"
algorithm = "grpo"
[campaigns.sft]
lr = 5e-5
[campaigns.schedule]
interval_s = 3600
"""


def test_campaigns_inherit_top_level_defaults(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text(MULTI)
    d = load_daemon_config(path)
    a, b = d.campaigns
    assert d.prefect.port == 4300
    assert (a.campaign, a.algorithm, a.sft.lr, a.sft.epochs, a.max_rounds, a.db) == ("a", "rft", 1e-4, 3, 5, "shared.duckdb")
    assert (b.campaign, b.algorithm, b.sft.lr, b.sft.epochs) == ("b", "grpo", 5e-5, 3)  # table merged key by key
    assert a.schedule == ScheduleConfig(cron="30 1 * * *", timezone="Europe/Berlin")
    assert b.schedule.interval_s == 3600 and b.schedule.timezone == "Europe/Berlin"
    # `ratchet run` picks one with --campaign
    assert load_config(path, campaign="b") == b
    with pytest.raises(ConfigError, match=r"declares campaigns \['a', 'b'\]; pick one with --campaign"):
        load_config(path)
    with pytest.raises(ConfigError, match="'c' is not among them"):
        load_config(path, campaign="c")
    # --interval-s overrides every schedule
    assert {c.schedule.interval_s for c in load_daemon_config(path, interval_s=7).campaigns} == {7}


def test_run_with_campaign_flag_reaches_the_chosen_campaign(tmp_path):
    path = tmp_path / "r.toml"
    path.write_text(MULTI)
    r = runner.invoke(app, ["run", "--config", str(path)])
    assert r.exit_code == 2 and "--campaign" in r.stderr


@pytest.mark.parametrize(
    "toml,msg",
    [
        ('[[campaigns]]\ncampaign = "x"\n[[campaigns]]\ncampaign = "x"\n', "must be unique, ['x']"),
        ('[schedule]\ncron = "every night"\n', "must have 5 fields"),
        ('[schedule]\ntimezone = "Mars/Olympus"\n', "not an IANA time zone"),
        ("[schedule]\ninterval_s = 0\n", "schedule.interval_s"),
        ("[prefect]\nport = 0\n", "prefect.port"),
        ('[[campaigns]]\ncampaign = "x"\n[campaigns.sft]\nlr = -1\n', "campaigns[0].sft.lr"),
        ("campaigns = 3\n", "non-empty array of tables"),
    ],
)
def test_bad_daemon_config_names_the_value(tmp_path, toml, msg):
    path = tmp_path / "r.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as e:
        load_daemon_config(path)
    assert msg in str(e.value)


def test_schedule_is_not_part_of_a_campaigns_identity():
    a = RatchetConfig()
    b = RatchetConfig(schedule=ScheduleConfig(interval_s=60, active=False))
    assert "schedule" not in a.campaign_settings() and a.campaign_settings() == b.campaign_settings()


def test_prefect_schedule_from_config():
    from ratchet.flows.daemon.schedules import describe, local_timezone, prefect_schedule

    cron = prefect_schedule(ScheduleConfig())
    assert cron.cron == "0 2 * * *" and cron.timezone == local_timezone()
    every = prefect_schedule(ScheduleConfig(interval_s=90, active=False))
    assert every.interval.total_seconds() == 90 and every.active is False
    assert describe(type("S", (), {"schedule": every})) == "every 90 s"
    assert render_default_toml().count("\n[schedule]\n") == 1


def test_a_cron_prefect_rejects_fails_before_serving():
    from ratchet.flows.daemon.service import check_schedule

    check_schedule(RatchetConfig())
    with pytest.raises(ConfigError, match=r"campaign 'demo': schedule.cron '\* \* \* \* 99' is not valid"):
        check_schedule(RatchetConfig(schedule=ScheduleConfig(cron="* * * * 99")))
