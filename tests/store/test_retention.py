"""Retention: rejected candidates and intermediate steps go once gated; base, incumbent, best-ever and the last K stay."""

from datetime import UTC, datetime

from ratchet.store.db import init_db, query, transaction
from ratchet.store.ingest import insert_rows
from ratchet.store.retention import apply_plan, retention_plan

NOW = datetime.now(UTC).replace(tzinfo=None)


def _ckpt(root, cid, parent):
    d = root / cid
    d.mkdir(parents=True)
    (d / "model.safetensors").write_bytes(b"w" * 1000)
    return dict(checkpoint_id=cid, parent_id=parent, training_run_id=f"tr-{cid}", model_ref="m", path=str(d), created_at=NOW)


def _round(con, root, index, outputs, decision):
    rid = f"c-r{index}"
    insert_rows(
        con,
        "rounds",
        [dict(round_id=rid, campaign_id="c", round_index=index, incumbent_checkpoint_id="b", status="completed", started_at=NOW)],
    )
    for cid in outputs:
        insert_rows(con, "checkpoints", [_ckpt(root, cid, "b")])
        insert_rows(
            con,
            "training_runs",
            [
                dict(
                    training_run_id=f"tr-{cid}", round_id=rid, algorithm="grpo", input_checkpoint_id="b", output_checkpoint_id=cid,
                    num_examples=1, config_json="{}", metrics_json="{}", started_at=NOW, finished_at=NOW,
                )
            ],
        )  # fmt: skip
    if decision:
        insert_rows(
            con,
            "gate_decisions",
            [
                dict(
                    round_id=rid, campaign_id="c", candidate_checkpoint_id=outputs[-1], incumbent_checkpoint_id="b",
                    decision=decision, reason="", incumbent_pass1=0.5, best_promoted_pass1=0.5, test="mcnemar",
                    tolerance=0.03, created_at=NOW,
                )
            ],
        )  # fmt: skip


def test_policy_keeps_base_incumbent_best_and_last_k(tmp_path):
    db, root = tmp_path / "r.duckdb", tmp_path / "runs" / "checkpoints"
    init_db(db)
    with transaction(db) as con:
        insert_rows(con, "campaigns", [dict(campaign_id="c", name="n", base_checkpoint_id="b", config_json="{}", created_at=NOW)])
        _round(con, root, 1, ["s1", "k1"], "promote")  # s1: an intermediate on-policy step
        _round(con, root, 2, ["k2"], "reject")
        _round(con, root, 3, ["k3"], "promote")
        _round(con, root, 4, ["k4"], "promote")
        _round(con, root, 5, ["k5"], "promote")
        _round(con, root, 6, ["k6"], None)  # not gated yet: untouchable
        insert_rows(
            con,
            "evaluations",
            [
                dict(evaluation_id=f"e{c}", round_id="c-r1", checkpoint_id=c, eval_set_id="es", metric="heldout/pass@1",
                     value=v, num_prompts=10, created_at=NOW)
                for c, v in [("k1", 0.9), ("k3", 0.6), ("k4", 0.7), ("k5", 0.65)]
            ],
        )  # fmt: skip
        plan = retention_plan(con, "c", root, keep_last_promoted=2)
        assert {(d.checkpoint_id, d.why) for d in plan} == {
            ("s1", "intermediate step"),
            ("k2", "rejected candidate"),
            ("k3", "older promoted"),
        }
        assert apply_plan(con, plan) == 3000
        assert retention_plan(con, "c", root, keep_last_promoted=2) == []  # idempotent
    assert sorted(p.name for p in root.iterdir()) == ["k1", "k4", "k5", "k6"]  # best-ever k1, last two k4 k5
    deleted = query(db, "SELECT checkpoint_id FROM checkpoints WHERE deleted_at IS NOT NULL ORDER BY 1")[1]
    assert deleted == [("k2",), ("k3",), ("s1",)]  # rows stay, marked


def test_unsaved_step_policies_have_nothing_to_delete(tmp_path):
    """A persistent round's intermediate steps have rows with path NULL: retention skips them, the candidate goes."""
    db, root = tmp_path / "r.duckdb", tmp_path / "runs" / "checkpoints"
    init_db(db)
    with transaction(db) as con:
        insert_rows(con, "campaigns", [dict(campaign_id="c", name="n", base_checkpoint_id="b", config_json="{}", created_at=NOW)])
        _round(con, root, 1, ["u1", "u2", "k1"], "reject")
        con.execute("UPDATE checkpoints SET path = NULL WHERE checkpoint_id IN ('u1', 'u2')")
        plan = retention_plan(con, "c", root, keep_last_promoted=2)
        assert [(d.checkpoint_id, d.why) for d in plan] == [("k1", "rejected candidate")]
        assert apply_plan(con, plan) == 1000
    assert query(db, "SELECT count(*) FROM checkpoints WHERE path IS NULL AND deleted_at IS NULL")[1][0][0] == 2
