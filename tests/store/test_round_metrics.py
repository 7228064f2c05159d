"""The per-round report queries over many rounds at once (``ratchet.store.read.round_metrics``): each round's rows are
exactly what that round alone gives, and the time bound that lets DuckDB skip older rounds' row groups never drops
a row of the rounds asked for (clock slack, a checkpoint without a recorded time)."""

from datetime import timedelta

import pytest

from ratchet.flows.report.triage import report_flips, report_flips_of_rounds
from ratchet.store.db import connect, transaction
from ratchet.store.ingest import insert_rows
from ratchet.store.read.round_metrics import (
    CLOCK_SLACK,
    gate_set_rows_of_rounds,
    heldout_completion_metrics,
    heldout_completion_metrics_of_rounds,
    rollout_metrics,
    rollout_metrics_by_source,
    rollout_metrics_by_source_of_rounds,
    rollout_metrics_of_rounds,
    round_evaluations,
    round_evaluations_of_rounds,
    round_phases,
    round_training,
    round_training_of_rounds,
    since_of,
    since_of_rounds,
    training_origins_of_rounds,
)
from tests.store.test_queries_report import T0, _traj, _verdict, build_store

SINGLE = {
    "rollouts": (rollout_metrics, rollout_metrics_of_rounds),
    "by_source": (rollout_metrics_by_source, rollout_metrics_by_source_of_rounds),
    "evaluations": (round_evaluations, round_evaluations_of_rounds),
    "heldout": (heldout_completion_metrics, heldout_completion_metrics_of_rounds),
    "training": (round_training, round_training_of_rounds),
}

INCUMBENTS = "SELECT incumbent_checkpoint_id AS checkpoint_id FROM rounds WHERE list_contains($round_ids, round_id)"


@pytest.fixture
def db(tmp_path):
    db = tmp_path / "r.duckdb"
    build_store(db)
    return db


def _alone(db) -> dict:
    with connect(db, read_only=True) as con:
        return {name: one(con, "c1-r1") for name, (one, _) in SINGLE.items()}


def test_each_round_gets_what_it_alone_gives_when_other_rounds_have_rows(db):
    before = _alone(db)  # round 1 while round 2 has no rollouts
    assert before["rollouts"] and before["heldout"] and before["evaluations"] and before["training"]
    with transaction(db) as con:  # round 2's own rollouts, one of them scored twice; a flip table of its own
        r2 = [
            _traj("r2a", "p1", "C", "rollout", 0, 7, round_id="c1-r2"),
            _traj("r2b", "p3", "C", "rollout", 1, 9, round_id="c1-r2"),
        ]
        insert_rows(con, "trajectories", r2)
        insert_rows(con, "verdicts", [_verdict("r2a", False, 0.0, "wrong_answer"), _verdict("r2b", True, 1.0, "correct")])
        insert_rows(con, "verdicts", [_verdict("r2a", True, 1.0, "correct", version="v2", at=T0 + timedelta(hours=2))])
    ids = ["c1-r1", "c1-r2", "no-such-round"]
    with connect(db, read_only=True) as con:
        many = {name: batched(con, ids) for name, (_, batched) in SINGLE.items()}
        alone_r2 = {name: one(con, "c1-r2") for name, (one, _) in SINGLE.items()}
        assert {name: rows["c1-r1"] for name, rows in many.items()} == before  # round 2's rows changed nothing of round 1
        assert {name: rows["c1-r2"] for name, rows in many.items()} == alone_r2
        everything = {r["task"]: r for r in many["rollouts"]["c1-r2"]}["all"]
        assert (everything["rollouts"], everything["pass_at_1"]) == (2, 1.0)  # r2a by its newest verdict
        assert many["rollouts"]["no-such-round"] == [] and many["training"]["no-such-round"] is None
        assert round_phases(con, ids) == dict.fromkeys(ids)
        assert training_origins_of_rounds(con, ids) == {"c1-r1": {}, "c1-r2": {}, "no-such-round": {}}
        assert gate_set_rows_of_rounds(con, ids) == {rid: [] for rid in ids}
        assert report_flips_of_rounds(con, ids, 5) == {rid: report_flips(con, rid, 5) for rid in ids}


def test_the_time_bound_keeps_rows_within_the_clock_slack_and_is_off_when_a_time_is_unknown(db):
    with connect(db, read_only=True) as con:
        assert since_of_rounds(con, ["c1-r1", "c1-r2"]) == T0 - CLOCK_SLACK  # round 1 started at T0
        assert since_of_rounds(con, ["no-such-round"]) == "-infinity"
        # build_store records no checkpoints rows: the held-out bound is off, not a guess
        assert since_of(con, INCUMBENTS, ["c1-r1", "c1-r2"]) == "-infinity"
    with transaction(db) as con:
        # a rollout written by a machine whose clock is 12 hours behind the driver's
        skewed = _traj("late", "p2", "B", "rollout", 2, 11) | {"created_at": T0 - timedelta(hours=12)}
        insert_rows(con, "trajectories", [skewed])
        insert_rows(con, "verdicts", [_verdict("late", True, 1.0, "correct", at=T0 - timedelta(hours=12))])
        insert_rows(
            con,
            "checkpoints",
            [dict(checkpoint_id="B", model_ref="m", created_at=T0), dict(checkpoint_id="C", model_ref="m", created_at=T0)],
        )
    with connect(db, read_only=True) as con:
        everything = {r["task"]: r for r in rollout_metrics(con, "c1-r1")}["all"]
        assert everything["rollouts"] == 7  # the six of build_store and the skewed one
        assert since_of(con, INCUMBENTS, ["c1-r1", "c1-r2"]) == T0 - CLOCK_SLACK  # B's and C's rows, both at T0
        assert [h["completions"] for h in heldout_completion_metrics(con, "c1-r1")] == [2, 2]
