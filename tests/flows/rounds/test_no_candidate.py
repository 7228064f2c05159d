"""A round that trains nothing is recorded as `no_candidate`, not as a gate `reject` (issue 24, finding 2)."""

import json

from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.flows.rounds.campaign import no_candidate_decision
from ratchet.store.db import init_db, transaction
from ratchet.store.ingest import insert_rows
from ratchet.store.queries import campaign_state
from tests.store.test_events import NOW


def test_nothing_trained_is_no_candidate_and_still_counts_towards_a_halt():
    d = no_candidate_decision("rft", consecutive_rejections=0, max_rejections=3)
    assert d["decision"] == "no_candidate" and d["candidate_pass1"] is None
    assert d["reason"].startswith("no candidate: no verified-correct trajectories to train on (raise generation.group_size")
    assert "differing rewards" in no_candidate_decision("grpo", 0, 3)["reason"]
    halt = no_candidate_decision("rft", consecutive_rejections=2, max_rejections=3)
    assert halt["decision"] == "halt" and halt["reason"].endswith("; 3 rounds in a row without a promotion")


def test_status_shows_no_candidate_rounds(tmp_path):
    db = tmp_path / "s.duckdb"
    init_db(db)
    with transaction(db) as con:
        insert_rows(
            con, "campaigns", [dict(campaign_id="c", name="mine", base_checkpoint_id="b", config_json="{}", created_at=NOW)]
        )
        for i in (1, 2):
            insert_rows(
                con,
                "rounds",
                [
                    dict(
                        round_id=f"c-r{i}",
                        campaign_id="c",
                        round_index=i,
                        incumbent_checkpoint_id="b",
                        status="completed",
                        started_at=NOW,
                    )
                ],
            )
            row = dict(round_id=f"c-r{i}", campaign_id="c", candidate_checkpoint_id=None, incumbent_checkpoint_id="b",
                       incumbent_pass1=0.0, best_promoted_pass1=0.0, test="mcnemar", tolerance=0.03, created_at=NOW)  # fmt: skip
            insert_rows(con, "gate_decisions", [{**row, **no_candidate_decision("rft", i - 1, 3)}])
        state = campaign_state(con, "c", "")
    assert (state.consecutive_rejections, state.halted, state.incumbent_checkpoint_id) == (2, False, "b")
    r = CliRunner().invoke(app, ["status", "--db", str(db), "--format", "json"])
    assert r.exit_code == 0, r.output
    rounds = json.loads(r.stdout)["campaigns"][0]["rounds"]
    assert [x["decision"] for x in rounds] == ["no_candidate", "no_candidate"]
    assert "no_candidate" in CliRunner().invoke(app, ["status", "--db", str(db)]).stdout
