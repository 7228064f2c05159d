"""An edited plugin file is a new verifier version: ``ratchet reverify --config`` adds verdict rows of it."""

import json

from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.flows.rounds.state.reverify import reverify
from ratchet.loop.config import load_config
from ratchet.store.db import init_db, query, transaction
from ratchet.store.ingest import insert_rows
from tests.store.test_store import NOW, traj

CHECKS = "def verify(completion, record):\n    return completion.strip() == record['reference']\n"


def _campaign_round_prompt(con, cfg):
    """Campaign ``c`` of ``cfg``, its completed round ``r1`` and the records prompt ``p1`` ("Say 7.", reference 7)."""
    insert_rows(con, "campaigns", [dict(campaign_id="c", name="c", base_checkpoint_id="c0", created_at=NOW,
                                        config_json=cfg.model_dump_json())])  # fmt: skip
    insert_rows(con, "rounds", [dict(round_id="r1", campaign_id="c", round_index=1, incumbent_checkpoint_id="c0",
                                     status="completed", started_at=NOW, finished_at=NOW, stage_seconds_json=None)])  # fmt: skip
    rec = json.dumps({"prompt": "Say 7.", "reference": "7"}, sort_keys=True)
    insert_rows(con, "prompts", [dict(prompt_id="p1", source="own", task="own", question="Say 7.", answer="7",
                                      split="train", task_format="records", record_json=rec)])  # fmt: skip


def seed(tmp_path):
    (tmp_path / "own_checks.py").write_text(CHECKS)
    (tmp_path / "own.jsonl").write_text(json.dumps({"prompt": "Say 7.", "reference": "7"}) + "\n")
    db = tmp_path / "s.duckdb"
    (tmp_path / "r.toml").write_text(
        f'db = "{db}"\nrun_dir = "{tmp_path / "runs"}"\n[[tasks.sources]]\npath = "own.jsonl"\nverifier = "own_checks:verify"\n'
    )
    cfg = load_config(tmp_path / "r.toml")
    init_db(db)
    with transaction(db) as con:
        _campaign_round_prompt(con, cfg)
        insert_rows(con, "trajectories", [traj("a", "p1", "7"), traj("b", "p1", "seven", sample=1)])
    return db


def test_an_edited_plugin_is_reverified_under_its_new_version(tmp_path):
    db = seed(tmp_path)
    first = reverify(db)
    assert first["rescored"] == 2 and first["flips"]["new"] == 2 and "+plugins[plugin:own_checks:verify=0+" in first["version"]
    rows = query(db, "SELECT trajectory_id, verifier, correct FROM verdicts ORDER BY 1")[1]
    assert rows == [("a", "plugin:own_checks:verify", True), ("b", "plugin:own_checks:verify", False)]
    assert reverify(db)["rescored"] == 0  # unchanged plugin: nothing to do
    (tmp_path / "own_checks.py").write_text(CHECKS.replace("== record['reference']", "in ('7', 'seven')"))
    r = CliRunner().invoke(app, ["reverify", "--config", str(tmp_path / "r.toml"), "--format", "json"])
    assert r.exit_code == 0, r.output
    second = json.loads(r.stdout)
    assert second["version"] != first["version"] and second["rescored"] == 2
    assert second["flips"] == {"wrong->right": 1, "right->wrong": 0, "unchanged": 1, "new": 0}
    versions = query(db, "SELECT verifier_version, count(*) FROM verdicts GROUP BY 1 ORDER BY 1")[1]
    assert sorted(v for v, _ in versions) == sorted([first["version"], second["version"]])


def test_a_campaign_whose_plugin_is_gone_is_skipped_with_why(tmp_path):
    db = seed(tmp_path)
    (tmp_path / "own_checks.py").unlink()
    res = reverify(db)
    assert res["rescored"] == 0 and "cannot import module 'own_checks'" in res["skipped"]["c"]


ENV = """
class Env:
    def reset(self, record):
        return None

    def step(self, messages):
        return {"role": "user", "content": "Sure?"}

    def score(self, messages, record):
        return messages[-1]["content"].strip() == record["reference"]
"""


def test_episodes_of_an_environment_with_score_are_reverified_by_it(tmp_path):
    """A source judged by its environment's score() (no verifier): reverify judges its stored episodes with it, as the
    round did, and counts those verdicts as done (before: 'names no verifier' stopped the whole reverify)."""
    (tmp_path / "own_env.py").write_text(ENV)
    (tmp_path / "own.jsonl").write_text(json.dumps({"prompt": "Say 7.", "reference": "7"}) + "\n")
    db = tmp_path / "s.duckdb"
    (tmp_path / "r.toml").write_text(
        f'db = "{db}"\nrun_dir = "{tmp_path / "runs"}"\n[[tasks.sources]]\npath = "own.jsonl"\n'
        'environment = "own_env:Env"\nmax_turns = 2\n'
    )
    cfg = load_config(tmp_path / "r.toml")
    init_db(db)
    opening = json.dumps([{"role": "user", "content": "Say 7."}])

    def episode(tid, first, last, sample):
        msgs = [
            {"role": "assistant", "content": first},
            {"role": "user", "content": "Sure?"},
            {"role": "assistant", "content": last},
        ]
        return {**traj(tid, "p1", last, sample=sample), "turns": 2, "messages": json.dumps(msgs), "prompt_messages": opening}

    with transaction(db) as con:
        _campaign_round_prompt(con, cfg)
        insert_rows(con, "trajectories", [episode("a", "6", "7", 0), episode("b", "7", "8", 1)])
    first = reverify(db)
    assert first["rescored"] == 2
    rows = query(db, "SELECT trajectory_id, verifier, correct FROM verdicts ORDER BY 1")[1]
    assert rows == [("a", "plugin:own_env:Env", True), ("b", "plugin:own_env:Env", False)]
    assert reverify(db)["rescored"] == 0  # its verdicts count: nothing left to do
