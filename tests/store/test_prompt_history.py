"""The store's side of prompt selection: the lineage's recent verdicts, round_prompts, the zero-variance summary."""

from datetime import UTC, datetime

from ratchet.store.db import connect, init_db, transaction
from ratchet.store.ingest import insert_rows
from ratchet.store.prompt_history import prompt_history, selection_summary

NOW = datetime.now(UTC)


def build_selection_store(tmp_path, cid: str = "c", version: str = "v1"):
    """Campaign `camp` (id ``cid``), rounds 1-5, lineage b -> k1 -> u -> k2 (x: a rejected sibling), the rollouts below."""
    db = tmp_path / "s.duckdb"
    init_db(db)
    with transaction(db) as con:
        insert_rows(con, "campaigns", [dict(campaign_id=cid, name="camp", base_checkpoint_id="b", config_json="{}", created_at=NOW)])  # fmt: skip
        for ck, parent in (("b", None), ("k1", "b"), ("u", "k1"), ("k2", "u"), ("x", "b")):
            insert_rows(con, "checkpoints", [dict(checkpoint_id=ck, parent_id=parent, model_ref="m", created_at=NOW)])
        for i in range(1, 6):
            insert_rows(con, "rounds", [dict(round_id=f"{cid}-r{i}", campaign_id=cid, round_index=i, incumbent_checkpoint_id="b", status="completed", started_at=NOW)])  # fmt: skip
        for pid, split, task in (("p1", "train", "easy"), ("p2", "train", "hard"), ("h1", "heldout", "easy"), ("e1", "train", "easy")):  # fmt: skip
            insert_rows(con, "prompts", [dict(prompt_id=pid, source="s", task=task, question=f"q {pid}", answer="1", split=split, question_key=pid)])  # fmt: skip
        # e1 is a train-split prompt that a campaign pinned for evaluation: never history
        insert_rows(con, "eval_set_prompts", [dict(campaign_id=cid, position=0, eval_name="heldout", prompt_id="e1", created_at=NOW)])  # fmt: skip
        rows, verdicts = [], []
        # (round, checkpoint, prompt, step, correct flags)
        plan = [
            (1, "b", "p1", 0, [1, 1, 1, 1]),  # outside a window of 3 from round 5
            (2, "b", "p1", 0, [1, 0, 1, 1]),
            (3, "k1", "p1", 0, [1, 1, 1, 1]),
            (3, "u", "p2", 1, [0, 0, 0, 0]),  # an unsaved step policy between k1 and k2: lineage
            (3, "x", "p2", 0, [1, 1, 1, 1]),  # a rejected sibling's: not the incumbent's lineage
            (4, "k2", "p2", 0, [1, 0, 0, 0]),
            (4, "k2", "h1", 0, [1, 1, 1, 1]),  # held-out
            (4, "k2", "e1", 0, [1, 1, 1, 1]),  # an eval prompt
            (5, "k2", "p1", 0, [0, 0, 0, 0]),  # the round itself
        ]
        for r, ck, pid, step, flags in plan:
            for j, ok in enumerate(flags):
                tid = f"{r}-{ck}-{pid}-{j}"
                rows.append(dict(trajectory_id=tid, round_id=f"{cid}-r{r}", prompt_id=pid, checkpoint_id=ck, purpose="rollout", sample_index=j, completion="a", prompt_tokens=3, completion_tokens=10 + j, finish_reason="stop", backend="t", temperature=0.8, top_p=1.0, max_new_tokens=8, seed=0, created_at=NOW, step=step))  # fmt: skip
                verdicts.append(dict(trajectory_id=tid, verifier="math", verifier_version=version, reward=float(ok), correct=bool(ok), reason="ok", latency_s=0.0, created_at=NOW))  # fmt: skip
        insert_rows(con, "trajectories", rows)
        insert_rows(con, "verdicts", verdicts)
        insert_rows(con, "round_prompts", [dict(round_id=f"{cid}-r4", prompt_id="p2", step=0, position=0, selection="frontier", pick="frontier", refill_pass=0, estimate=0.4, alpha=1.2, beta=1.8, seen_rollouts=4, seen_correct=0, informative=0.6, created_at=NOW), dict(round_id=f"{cid}-r4", prompt_id="h1", step=0, position=1, selection="frontier", pick="reserve", refill_pass=1, estimate=0.9, alpha=3.0, beta=0.3, seen_rollouts=0, seen_correct=0, informative=0.2, created_at=NOW)])  # fmt: skip
    return db


def test_history_reads_the_incumbents_lineage_in_the_window_and_never_an_eval_prompt(tmp_path):
    db = build_selection_store(tmp_path)
    with connect(db, read_only=True) as con:
        prompts, groups = prompt_history(con, "c", 5, "k2", "v1", 3)
        assert prompts == {"p1": (8, 7), "p2": (8, 1)}  # rounds 2-4, lineage k2 -> u -> k1 -> b
        assert groups == {("s", "easy"): (8, 7), ("s", "hard"): (8, 1)}
        assert prompt_history(con, "c", 5, "x", "v1", 3)[0] == {"p1": (4, 3), "p2": (4, 4)}  # x -> b
        assert prompt_history(con, "c", 5, "k2", "v2", 3) == ({}, {})  # another verifier version: no verdicts
        assert prompt_history(con, "c", 1, "b", "v1", 3) == ({}, {})  # round 1: no history


def test_selection_summary_counts_zero_variance_groups_and_their_tokens(tmp_path):
    db = build_selection_store(tmp_path)
    with connect(db, read_only=True) as con:
        rows = {(r["round_index"], r["step"]): r for r in selection_summary(con, "c", "v1")}
    r4 = rows[(4, 0)]  # p2 mixed; h1 held-out and e1 an eval prompt are not training groups
    assert (r4["groups"], r4["zero_variance_groups"], r4["zero_variance_tokens"]) == (1, 0, 0)
    assert (r4["drawn"], r4["refilled"], r4["estimates"], r4["selection"]) == (2, 1, [0.4, 0.9], "frontier")
    r3 = rows[(3, 0)]  # k1 on p1 all right, x on p2 all right: both zero variance
    assert (r3["groups"], r3["zero_variance_groups"], r3["zero_variance_tokens"], r3["drawn"]) == (2, 2, 2 * 46, None)
    assert rows[(3, 1)]["zero_variance_groups"] == 1
