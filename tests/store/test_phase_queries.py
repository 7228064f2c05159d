"""The store's view of phases: rounds.stage (the phase), training_examples.origin, a campaign's recorded phases."""

import json
from datetime import UTC, datetime

from ratchet.store.db import connect, init_db, transaction
from ratchet.store.ingest import insert_rows
from ratchet.store.queries import campaign_by_name
from ratchet.store.read.reports import campaign_phases, phase_rounds
from ratchet.store.read.round_metrics import round_phase, training_origins

NOW = datetime.now(UTC)


def test_phase_columns_and_queries(tmp_path):
    db = tmp_path / "s.duckdb"
    init_db(db)
    phases = [{"name": "cold", "algorithm": "sft", "rounds": 1}, {"name": None, "algorithm": "grpo", "rounds": 2}]
    with transaction(db) as con:
        insert_rows(con, "campaigns", [dict(campaign_id="c", name="camp", base_checkpoint_id="b", config_json=json.dumps({"phases": phases}), created_at=NOW)])  # fmt: skip
        for i, stage in ((1, "cold"), (2, "phase-2")):
            insert_rows(con, "rounds", [dict(round_id=f"c-r{i}", campaign_id="c", round_index=i, incumbent_checkpoint_id="b", status="completed", started_at=NOW, stage=stage)])  # fmt: skip
        insert_rows(con, "training_runs", [dict(training_run_id="t1", round_id="c-r1", algorithm="sft", input_checkpoint_id="b", output_checkpoint_id="k", num_examples=3, config_json="{}", metrics_json="{}", started_at=NOW, finished_at=NOW)])  # fmt: skip
        insert_rows(
            con,
            "training_examples",
            [
                dict(training_run_id="t1", trajectory_id="p1", origin="reference"),
                dict(training_run_id="t1", trajectory_id="p2", origin="reference"),
                dict(training_run_id="t1", trajectory_id="g1", origin="general"),
            ],
        )
    with connect(db, read_only=True) as con:
        assert round_phase(con, "c-r1") == "cold" and round_phase(con, "c-r2") == "phase-2"
        assert training_origins(con, "c-r1") == {"reference": 2, "general": 1} and training_origins(con, "c-r2") == {}
        assert campaign_phases(con, "camp") == [
            {"name": "cold", "algorithm": "sft", "rounds": 1},
            {"name": "phase-2", "algorithm": "grpo", "rounds": 2},
        ]
        assert [(r["round_index"], r["stage"], r["algorithm"]) for r in phase_rounds(con, "camp")] == [
            (1, "cold", "sft"),
            (2, "phase-2", None),
        ]
        assert con.execute("SELECT stage FROM round_summary ORDER BY round_index").fetchall() == [("cold",), ("phase-2",)]


def test_a_campaign_recorded_with_stages_reads_them_as_phases(tmp_path):
    """Settings stored before the rename hold ``stages``; its unnamed ones keep the label its rounds were stored with."""
    db = tmp_path / "s.duckdb"
    init_db(db)
    stages = [{"name": "cold", "algorithm": "sft", "rounds": 1}, {"name": None, "algorithm": "grpo", "rounds": 2}]
    with transaction(db) as con:
        insert_rows(con, "campaigns", [dict(campaign_id="c", name="camp", base_checkpoint_id="b", config_json=json.dumps({"stages": stages}), created_at=NOW)])  # fmt: skip
    with connect(db, read_only=True) as con:
        assert campaign_phases(con, "camp") == [
            {"name": "cold", "algorithm": "sft", "rounds": 1},
            {"name": "stage-2", "algorithm": "grpo", "rounds": 2},
        ]
        assert campaign_by_name(con, "camp")["config"] == {"phases": stages}  # compared with a config's phases
