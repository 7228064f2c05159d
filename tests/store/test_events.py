"""Campaign events: a person's halt, pause and resume replayed with the gate's decisions."""

from datetime import UTC, datetime

import pytest

from ratchet.store.db import init_db, query, transaction
from ratchet.store.events import record_event
from ratchet.store.ingest import insert_rows
from ratchet.store.queries import campaign_controls, campaign_state

NOW = datetime.now(UTC).replace(tzinfo=None)


def _gate(con, index, decision):
    rid = f"c-r{index}"
    insert_rows(
        con,
        "rounds",
        [dict(round_id=rid, campaign_id="c", round_index=index, incumbent_checkpoint_id="b", status="completed", started_at=NOW)],
    )
    insert_rows(
        con,
        "gate_decisions",
        [
            dict(
                round_id=rid,
                campaign_id="c",
                candidate_checkpoint_id=f"k{index}",
                incumbent_checkpoint_id="b",
                decision=decision,
                reason=f"{decision} {index}",
                incumbent_pass1=0.5,
                best_promoted_pass1=0.5,
                test="mcnemar",
                tolerance=0.03,
                created_at=NOW,
            )
        ],
    )


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "e.duckdb"
    init_db(path)
    with transaction(path) as con:
        insert_rows(
            con, "campaigns", [dict(campaign_id="c", name="nightly", base_checkpoint_id="b", config_json="{}", created_at=NOW)]
        )
    return path


def test_gate_halt_is_lifted_by_resume_and_rejections_count_again(db):
    with transaction(db) as con:
        _gate(con, 1, "reject")
        _gate(con, 2, "halt")
        assert campaign_state(con, "c", "").halted
        assert campaign_controls(con, ["nightly"])["nightly"]["not_running"] == "halted: halt 2"
        record_event(con, "c", "resume", "lower lr after a late decline")
        s = campaign_state(con, "c", "")
        assert not s.halted and s.consecutive_rejections == 0
        _gate(con, 3, "reject")  # one rejection after the resume: counted from 0, not 3
        assert campaign_state(con, "c", "").consecutive_rejections == 1
        record_event(con, "c", "pause", "disk maintenance")
        ctl = campaign_controls(con, ["nightly"])["nightly"]
        assert campaign_state(con, "c", "").paused and ctl["not_running"].startswith("paused: disk maintenance")
        assert [e["action"] for e in ctl["events"]] == ["resume", "pause"] and ctl["rounds_done"] == 3
    rows = query(db, "SELECT action, after_round_index, actor FROM campaign_events ORDER BY created_at")[1]
    assert [(a, n) for a, n, _ in rows] == [("resume", 2), ("pause", 3)] and all("@" in who for *_, who in rows)


def test_event_needs_a_reason_and_a_known_action(db):
    with transaction(db) as con:
        with pytest.raises(ValueError, match="needs a reason"):
            record_event(con, "c", "halt", "  ")
        with pytest.raises(ValueError, match="halt, pause, resume"):
            record_event(con, "c", "stop", "x")
