import multiprocessing as mp
import time
from datetime import UTC, datetime

import duckdb
import pytest

from ratchet.store.db import StoreError, connect, init_db, query, transaction
from ratchet.store.ingest import ingest_parquet, insert_rows, write_parquet
from ratchet.store.queries import training_set

NOW = datetime.now(UTC)


def traj(tid, prompt, completion, round_id="r1", purpose="rollout", sample=0, finish="stop"):
    return dict(
        trajectory_id=tid,
        round_id=round_id,
        prompt_id=prompt,
        checkpoint_id="c0",
        purpose=purpose,
        eval_set_id=None,
        sample_index=sample,
        completion=completion,
        prompt_tokens=10,
        completion_tokens=5,
        finish_reason=finish,
        backend="transformers",
        temperature=0.8,
        top_p=1.0,
        max_new_tokens=32,
        seed=0,
        created_at=NOW,
    )


def verdict(tid, correct, version="v1"):
    return dict(
        trajectory_id=tid,
        verifier="composite",
        verifier_version=version,
        reward=1.1 if correct else 0.1,
        correct=correct,
        reason="ok" if correct else "wrong",
        parsed="7",
        format_ok=True,
        latency_s=0.001,
        created_at=NOW,
    )


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "s.duckdb"
    init_db(path)
    init_db(path)  # idempotent
    with transaction(path) as con:
        insert_rows(
            con,
            "prompts",
            [
                dict(prompt_id="p1", source="s", task="t", question="q1", answer="7", split="train"),
                dict(prompt_id="p2", source="s", task="t", question="q2", answer="7", split="train"),
                dict(prompt_id="h1", source="s", task="t", question="q3", answer="7", split="heldout"),
            ],
        )
    return path


def test_ingest_is_idempotent(db, tmp_path):
    rows = [traj(f"t{i}", "p1", f"Answer: {i}", sample=i) for i in range(50)]
    f = write_parquet(rows, tmp_path / "part-0.parquet", "trajectories")
    with transaction(db) as con:
        assert ingest_parquet(con, "trajectories", [f]) == 50
        assert ingest_parquet(con, "trajectories", [f]) == 0
    assert query(db, "SELECT count(*), count(DISTINCT trajectory_id) FROM trajectories")[1] == [(50, 50)]


def test_write_parquet_checks_columns(tmp_path):
    with pytest.raises(ValueError, match="missing"):
        write_parquet([{"trajectory_id": "x"}], tmp_path / "x.parquet", "trajectories")


def test_training_set_sees_only_correct_train_rollouts_of_the_round(db):
    rows = [
        traj("a0", "p1", "Answer: 7", sample=0),
        traj("a1", "p1", "Answer: 7", sample=1),  # duplicate text
        traj("a2", "p1", "7\nAnswer: 7", sample=2),
        traj("a3", "p1", "so\nAnswer: 7", sample=3),  # over the cap
        traj("b0", "p2", "Answer: 8"),  # wrong
        traj("b1", "p2", "Answer: 7 and", sample=1, finish="length"),  # truncated
        traj("h0", "h1", "Answer: 7"),  # held-out prompt
        traj("o0", "p2", "Answer: 7", round_id="r0"),  # other round
        traj("e0", "p2", "Answer: 7", purpose="eval_greedy"),
    ]  # not a rollout
    correct = {"a0", "a1", "a2", "a3", "b1", "h0", "o0", "e0"}
    with transaction(db) as con:
        insert_rows(con, "trajectories", rows)
        insert_rows(con, "verdicts", [verdict(r["trajectory_id"], r["trajectory_id"] in correct) for r in rows])
        insert_rows(con, "verdicts", [verdict("b0", True, version="v0")])  # an old verifier version said yes
        got = training_set(con, "r1", "v1", max_per_prompt=2)
    assert [r["trajectory_id"] for r in got] == ["a0", "a2"]


def _hold_lock(path, seconds):
    from ratchet.store.catalog import writer_path

    con = duckdb.connect(str(writer_path(path)))  # another Ratchet process writing
    con.execute("INSERT INTO prompts VALUES ('p9', 's', 't', 'q9', '1', 'train')")
    time.sleep(seconds)
    con.close()


def test_reader_waits_out_a_writer_lock(db):
    p = mp.get_context("spawn").Process(target=_hold_lock, args=(db, 1.5))
    p.start()
    time.sleep(0.8)  # the other process holds the file now
    t0 = time.monotonic()
    cols, rows = query(db, "SELECT count(*) FROM prompts", timeout_s=30)
    p.join()
    assert rows[0][0] in (3, 4) and time.monotonic() - t0 < 30


def test_unwritable_and_missing_paths_have_clear_errors(tmp_path):
    with pytest.raises(StoreError, match="no store at"):
        with connect(tmp_path / "absent.duckdb", read_only=True):
            pass
    with pytest.raises(StoreError, match="is a directory"):
        init_db(tmp_path)
    with pytest.raises(StoreError, match="not writable|cannot create"):
        init_db("/proc/ratchet/x.duckdb")


def test_views_exist(db):
    cols, _ = query(db, "SELECT * FROM round_summary")
    assert "decision" in cols and "training_examples" in cols
    cols, _ = query(db, "SELECT * FROM round_verifier_stats")
    assert {"reward_mean", "reward_var", "reasons"} <= set(cols)


def test_training_set_never_joins_an_eval_prompt(db, tmp_path):
    # p2 is pinned as an evaluation prompt; p3 asks the eval question e1 in other words (same question key).
    with transaction(db) as con:
        insert_rows(
            con,
            "prompts",
            [
                dict(prompt_id="e1", source="eval:b", task="t", question="Q 1", answer="7", split="heldout", question_key="k1"),
                dict(prompt_id="p3", source="s", task="t", question="q  1", answer="7.0", split="train", question_key="k1"),
            ],
        )
        insert_rows(
            con,
            "eval_set_prompts",
            [
                dict(campaign_id="c", position=0, eval_name="b", prompt_id="e1", created_at=NOW),
                dict(campaign_id="c", position=1, eval_name="b", prompt_id="p2", created_at=NOW),
            ],
        )
    rows = [traj("a", "p1", "Answer: 7"), traj("b", "p2", "Answer: 7"), traj("c", "p3", "Answer: 7")]
    f = write_parquet(rows, tmp_path / "t.parquet", "trajectories")
    with transaction(db) as con:
        ingest_parquet(con, "trajectories", [f])
        insert_rows(con, "verdicts", [verdict(t, True) for t in "abc"])
    with connect(db, read_only=True) as con:
        assert [r["prompt_id"] for r in training_set(con, "r1", "v1", 2)] == ["p1"]


def test_older_store_gets_nullable_checkpoint_path_and_readers_name_unsaved_policies(tmp_path):
    """A store whose ``checkpoints.path`` is NOT NULL (before persistent rounds) is migrated; a NULL path reads
    back as 'no saved weights', in the store and in the reader catalog."""
    from ratchet.store.queries import checkpoint_dir

    db = tmp_path / "old.duckdb"
    init_db(db)
    with connect(db) as con:  # what an older Ratchet created
        con.execute("ALTER TABLE checkpoints ALTER COLUMN path SET NOT NULL")
        with pytest.raises(duckdb.ConstraintException):
            con.execute("INSERT INTO checkpoints (checkpoint_id, model_ref, path, created_at) VALUES ('x', 'm', NULL, now())")
    init_db(db)
    row = dict(checkpoint_id="u", parent_id="b", training_run_id="tr", model_ref="m", path=None, created_at=NOW)
    with transaction(db) as con:
        insert_rows(con, "checkpoints", [row, {**row, "checkpoint_id": "b", "parent_id": None, "path": str(tmp_path)}])
        assert checkpoint_dir(con, "b") == str(tmp_path)
        with pytest.raises(LookupError, match="u has no saved weights"):
            checkpoint_dir(con, "u")
        with pytest.raises(LookupError, match="not in the store"):
            checkpoint_dir(con, "nope")
    assert query(db, "SELECT checkpoint_id FROM checkpoints WHERE path IS NULL")[1] == [("u",)]


def test_sampled_ids_and_logprobs_are_stored_and_an_older_store_migrates_to_null(db, tmp_path):
    """``completion_token_ids INTEGER[]`` and ``sampler_logprobs DOUBLE[]`` go in through Parquet and come out of the
    training queries; a store made before them gets the columns, its old rows reading NULL (training re-tokenizes those)."""
    from ratchet.store.queries import rollout_groups

    new = {**traj("t1", "p1", "Answer: 7"), "completion_token_ids": [5, 6, 2], "sampler_logprobs": [-0.5, -1.25, -0.01]}
    new["prompt_ids_hash"] = "00ff00ff00ff00ff"
    part = write_parquet([new], tmp_path / "part.parquet", "trajectories")
    with transaction(db) as con:
        ingest_parquet(con, "trajectories", [part])
        insert_rows(con, "verdicts", [verdict("t1", True)])
        assert con.execute("SELECT typeof(completion_token_ids), typeof(sampler_logprobs) FROM trajectories").fetchone() == (
            "INTEGER[]",
            "DOUBLE[]",
        )
        (row,) = rollout_groups(con, "r1", "v1")
        assert (row["completion_token_ids"], row["sampler_logprobs"]) == ([5, 6, 2], [-0.5, -1.25, -0.01])
        assert training_set(con, "r1", "v1", 2)[0]["completion_token_ids"] == [5, 6, 2]
    old = tmp_path / "old.duckdb"
    init_db(old)
    with connect(old) as con:  # what an older Ratchet created: a row, and no such columns
        insert_rows(con, "trajectories", [traj("t0", "p1", "Answer: 7")])
        for col in ("completion_token_ids", "sampler_logprobs", "prompt_ids_hash"):
            con.execute(f"ALTER TABLE trajectories DROP COLUMN {col}")
    init_db(old)
    got = query(old, "SELECT completion_token_ids, sampler_logprobs, prompt_ids_hash FROM trajectories")[1]
    assert got == [(None, None, None)]
