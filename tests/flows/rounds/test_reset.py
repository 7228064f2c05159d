"""`ratchet run --reset`: an interrupted trial's campaign start is retired so an edited config starts afresh (issue 24,
finding 6); a campaign that completed a round is never reset."""

import json
import socket

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.flows.daemon.service import owner_alive
from ratchet.flows.rounds.campaign import preflight, prepare_campaign, start_round
from ratchet.flows.rounds.reset import reset_campaign
from ratchet.flows.rounds.state.identity import CampaignConflict, with_campaign_epoch
from ratchet.loop.campaign.round_context import Ctx, save_config
from ratchet.loop.config import load_config
from ratchet.store.db import query, transaction
from tests.flows.rounds.test_round import write_sum_tasks


def test_reset_retires_a_start_without_completed_rounds(tmp_path, tiny_model_dir):
    toml = tmp_path / "r.toml"
    body = (
        f'db = "{tmp_path / "r.duckdb"}"\ncampaign = "trial"\n[model]\nname_or_path = "{tiny_model_dir}"\n'
        f'[tasks]\nsource = "jsonl"\npath = "{write_sum_tasks(tmp_path)}"\nheldout_fraction = 0.3\nfewshot = 0\n'
        'system_prompt = "sys"\ntrain_prompts_per_round = 12\nheldout_prompts = 10\n[preflight]\npilot = false\n'
    )
    toml.write_text(body + "[generation]\nmax_new_tokens = 6\n")
    old = with_campaign_epoch(load_config(toml))
    assert old.campaign_epoch == 0
    prepare_campaign.fn(str(save_config(old)))
    start_round.fn(str(save_config(old)), 1)  # an interrupted trial: round 1 left running by this (live) process
    marker = Ctx(old, 1).stage_dir("generate") / "_SUCCESS.json"
    marker.parent.mkdir(parents=True)
    marker.write_text("{}")

    toml.write_text(body + "[generation]\nmax_new_tokens = 64\n")  # the edit after the trial
    r = CliRunner().invoke(app, ["run", "--config", str(toml)])
    assert r.exit_code == 2 and "different settings (generation.max_new_tokens)" in r.stderr, r.output
    assert "it never completed a round: `ratchet run --reset` drops it" in r.stderr
    r = CliRunner().invoke(app, ["run", "--config", str(toml), "--reset", "--dry-run"])
    assert r.exit_code == 2 and "without --dry-run" in r.stderr

    new = with_campaign_epoch(load_config(toml))
    with pytest.raises(CampaignConflict, match="round 1 of campaign 'trial' is running"):
        reset_campaign(new, owner_alive)
    with transaction(new.db) as con:  # the trial's process is gone (Ctrl-C)
        con.execute("UPDATE rounds SET owner = ?", [f"{socket.gethostname()}:999999999"])
    line = reset_campaign(new, owner_alive)
    assert line.startswith("reset: campaign 'trial' had no completed round; its start is kept in the store as 'trial~reset-0'")
    assert not marker.exists()  # a resumed round would otherwise reuse the trial's stage outputs
    new = with_campaign_epoch(new)
    assert new.campaign_epoch == 1 and Ctx(new).campaign_id != Ctx(old).campaign_id  # no id of the trial's rows recurs
    preflight(new, dry_run=True)  # no conflict now
    prepare_campaign.fn(str(save_config(new)))
    rows = query(
        new.db,
        "SELECT c.name, count(r.round_id), max(r.status) FROM campaigns c LEFT JOIN rounds r USING (campaign_id) GROUP BY 1 ORDER BY 1",
    )[1]
    assert rows == [("trial", 0, None), ("trial~reset-0", 1, "crashed")]
    assert with_campaign_epoch(load_config(toml)).campaign_epoch == 1  # the next plain `ratchet run` finds it again

    with transaction(new.db) as con:  # once a round completed, the history stays
        con.execute("UPDATE rounds SET campaign_id = ?, status = 'completed'", [Ctx(new).campaign_id])
    with pytest.raises(CampaignConflict, match="has 1 completed round"):
        reset_campaign(new, owner_alive)
    r = CliRunner().invoke(app, ["status", "--db", str(new.db), "--format", "json"])
    assert [c["name"] for c in json.loads(r.stdout)["campaigns"]] == ["trial~reset-0", "trial"]
