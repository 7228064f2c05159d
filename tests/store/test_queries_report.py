"""The report queries (store.queries) against a small store built through the real ingest, checked by hand."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from ratchet.store.db import connect, init_db, transaction
from ratchet.store.ingest import insert_rows
from ratchet.store.read.reports import pass1_history, report_campaigns
from ratchet.store.read.round_metrics import heldout_completion_metrics, rollout_metrics, round_evaluations, round_training

T0 = datetime(2026, 1, 1, tzinfo=UTC)
ES = "evalset-e"


def _traj(tid, prompt, ckpt, purpose, idx, tokens, finish="stop", round_id="c1-r1", eval_set=None):
    return dict(
        trajectory_id=tid,
        round_id=round_id,
        prompt_id=prompt,
        checkpoint_id=ckpt,
        purpose=purpose,
        eval_set_id=eval_set,
        sample_index=idx,
        completion=f"text {tid}",
        prompt_tokens=5,
        completion_tokens=tokens,
        finish_reason=finish,
        backend="transformers",
        temperature=0.8,
        top_p=1.0,
        max_new_tokens=40,
        seed=0,
        created_at=T0,
    )


def _verdict(tid, correct, reward, reason, format_ok=True, version="v1", at=T0):
    return dict(
        trajectory_id=tid,
        verifier="composite",
        verifier_version=version,
        reward=reward,
        correct=correct,
        reason=reason,
        parsed=None,
        format_ok=format_ok,
        latency_s=0.01,
        created_at=at,
    )


def build_store(db) -> None:
    """Campaign `one` (c1): round 1 (rollouts on 3 train prompts x 2, GRPO run, promote), round 2 failed before
    its gate; campaign `two` (c2) without rounds. Written through the real schema and ingest."""
    init_db(db)
    trajs = [
        _traj("a0", "p1", "B", "rollout", 0, 10),
        _traj("a1", "p1", "B", "rollout", 1, 20),
        _traj("b0", "p2", "B", "rollout", 0, 30, finish="length"),
        _traj("b1", "p2", "B", "rollout", 1, 40),
        _traj("m0", "p3", "B", "rollout", 0, 5),
        _traj("m1", "p3", "B", "rollout", 1, 5),
        _traj("hb1", "h1", "B", "eval_greedy", 0, 8, eval_set=ES),
        _traj("hb2", "h2", "B", "eval_greedy", 0, 12, eval_set=ES),
        _traj("hc1", "h1", "C", "eval_greedy", 0, 4, eval_set=ES),
        _traj("hc2", "h2", "C", "eval_greedy", 0, 6, finish="length", eval_set=ES),
    ]
    verdicts = [
        _verdict("a0", True, 1.1, "correct"),
        _verdict("a1", False, 0.1, "wrong_answer"),
        _verdict("b0", False, 0.0, "no_answer", format_ok=False),
        _verdict("b1", False, 0.1, "wrong_answer"),
        _verdict("m0", True, 1.1, "correct"),
        _verdict("m1", True, 1.1, "correct"),
        # a later verifier version re-judged a1 as correct
        _verdict("a1", True, 1.1, "correct", version="v2", at=T0 + timedelta(days=1)),
        _verdict("hb1", True, 1.1, "correct"),
        _verdict("hb2", False, 0.1, "wrong_answer"),
        _verdict("hc1", True, 1.1, "correct"),
        _verdict("hc2", True, 1.0, "correct", format_ok=False),
    ]
    prompts = [
        dict(prompt_id=p, source="s", task=task, question="q", answer="1", split=split)
        for p, task, split in [
            ("p1", "add", "train"),
            ("p2", "add", "train"),
            ("p3", "mul", "train"),
            ("h1", "add", "heldout"),
            ("h2", "add", "heldout"),
        ]
    ]
    metrics = {"train/kl/mean": 0.02, "train/entropy/mean": 1.5, "train/loss": -0.25, "steps": [{"train/kl/mean": 0.02}]}
    with transaction(db) as con:
        insert_rows(
            con,
            "campaigns",
            [
                dict(
                    campaign_id="c1",
                    name="one",
                    base_checkpoint_id="B",
                    config_json=json.dumps({"algorithm": "grpo"}),
                    created_at=T0,
                ),
                dict(
                    campaign_id="c2",
                    name="two",
                    base_checkpoint_id="B",
                    config_json=json.dumps({"algorithm": "rft"}),
                    created_at=T0 + timedelta(hours=1),
                ),
            ],
        )
        insert_rows(
            con,
            "rounds",
            [
                dict(
                    round_id="c1-r1",
                    campaign_id="c1",
                    round_index=1,
                    incumbent_checkpoint_id="B",
                    status="completed",
                    started_at=T0,
                    finished_at=T0 + timedelta(minutes=5),
                ),
                dict(
                    round_id="c1-r2",
                    campaign_id="c1",
                    round_index=2,
                    incumbent_checkpoint_id="C",
                    status="failed",
                    started_at=T0 + timedelta(minutes=6),
                    finished_at=T0 + timedelta(minutes=7),
                ),
            ],
        )
        insert_rows(con, "prompts", prompts)
        insert_rows(con, "trajectories", trajs)
        insert_rows(con, "verdicts", verdicts)
        insert_rows(
            con,
            "training_runs",
            [
                dict(
                    training_run_id="tr1",
                    round_id="c1-r1",
                    algorithm="grpo",
                    input_checkpoint_id="B",
                    output_checkpoint_id="C",
                    num_examples=6,
                    config_json="{}",
                    metrics_json=json.dumps(metrics),
                    started_at=T0,
                    finished_at=T0,
                )
            ],
        )
        insert_rows(
            con,
            "evaluations",
            [
                dict(
                    evaluation_id=f"{c}-{m}",
                    round_id="c1-r1",
                    checkpoint_id=c,
                    eval_set_id=ES,
                    metric=m,
                    value=v,
                    num_prompts=2,
                    created_at=T0 + timedelta(minutes=1),
                )
                for c, m, v in [("B", "heldout/pass@1", 0.5), ("C", "heldout/pass@1", 1.0), ("C", "heldout/no_answer_rate", 0.0)]
            ],
        )
        insert_rows(
            con,
            "gate_decisions",
            [
                dict(
                    round_id="c1-r1",
                    campaign_id="c1",
                    candidate_checkpoint_id="C",
                    incumbent_checkpoint_id="B",
                    decision="promote",
                    reason="better",
                    candidate_pass1=1.0,
                    incumbent_pass1=0.5,
                    best_promoted_pass1=0.5,
                    delta=0.5,
                    p_value=0.9,
                    test="mcnemar",
                    tolerance=0.03,
                    created_at=T0 + timedelta(minutes=5),
                )
            ],
        )


@pytest.fixture
def store(tmp_path):
    build_store(tmp_path / "s.duckdb")
    with connect(tmp_path / "s.duckdb", read_only=True) as con:
        yield con


def test_rollout_metrics_by_task_and_overall(store):
    rows = {r["task"]: r for r in rollout_metrics(store, "c1-r1", "v1")}
    assert list(rows) == ["add", "mul", "all"]
    add, mul, every = rows["add"], rows["mul"], rows["all"]
    assert (add["prompts"], add["rollouts"], add["k"]) == (2, 4, 2)
    assert add["pass_at_1"] == pytest.approx(1 / 4) and add["pass_at_k"] == pytest.approx(1 / 2)
    assert add["reward_mean"] == pytest.approx((1.1 + 0.1 + 0.0 + 0.1) / 4)
    assert add["format_error_rate"] == pytest.approx(1 / 4) and add["truncated_rate"] == pytest.approx(1 / 4)
    assert add["completion_tokens_p90"] == pytest.approx(37.0)  # [10, 20, 30, 40]: index 2.7 -> 30 + 0.7 * 10
    assert add["reasons"] == {"correct": 1, "wrong_answer": 2, "no_answer": 1}
    assert (mul["pass_at_1"], mul["pass_at_k"], mul["completion_tokens_p90"]) == (1.0, 1.0, 5.0)
    assert (every["prompts"], every["rollouts"]) == (3, 6)
    assert every["pass_at_1"] == pytest.approx(3 / 6) and every["pass_at_k"] == pytest.approx(2 / 3)
    assert every["reward_mean"] == pytest.approx((1.3 + 2.2) / 6) and every["format_error_rate"] == pytest.approx(1 / 6)
    assert every["completion_tokens_p90"] == pytest.approx(35.0)  # [5, 5, 10, 20, 30, 40]: index 4.5 -> 30 + 0.5 * 10


def test_rollout_metrics_take_the_newest_verdict_unless_a_version_is_named(store):
    newest = {r["task"]: r for r in rollout_metrics(store, "c1-r1")}
    assert newest["add"]["pass_at_1"] == pytest.approx(2 / 4) and newest["add"]["reasons"]["correct"] == 2
    assert newest["all"]["rollouts"] == 6  # one verdict per trajectory, never both versions
    assert rollout_metrics(store, "c1-r1", "no-such-version") == []
    assert rollout_metrics(store, "c1-r2") == []


def test_round_evaluations_reuse_earlier_rounds_and_name_roles(store):
    r1 = round_evaluations(store, "c1-r1")
    assert [(r["role"], r["checkpoint_id"], r["metric"], r["value"]) for r in r1] == [
        ("incumbent", "B", "heldout/pass@1", 0.5),
        ("candidate", "C", "heldout/no_answer_rate", 0.0),
        ("candidate", "C", "heldout/pass@1", 1.0),
    ]
    # Round 2 failed before training: its incumbent C was evaluated by round 1, and there is no candidate.
    r2 = round_evaluations(store, "c1-r2")
    assert {(r["role"], r["checkpoint_id"], r["metric"]) for r in r2} == {
        ("incumbent", "C", "heldout/pass@1"),
        ("incumbent", "C", "heldout/no_answer_rate"),
    }


def test_heldout_completion_metrics_per_role(store):
    rows = {r["role"]: r for r in heldout_completion_metrics(store, "c1-r1", "v1")}
    assert rows["incumbent"]["completions"] == 2 and rows["incumbent"]["completion_tokens_p90"] == pytest.approx(11.6)
    cand = rows["candidate"]
    assert cand["checkpoint_id"] == "C" and cand["completion_tokens_p90"] == pytest.approx(5.8)
    assert cand["format_error_rate"] == pytest.approx(0.5) and cand["truncated_rate"] == pytest.approx(0.5)
    assert cand["reasons"] == {"correct": 2}


def test_round_training_reads_kl_for_grpo_only(store):
    t = round_training(store, "c1-r1")
    assert (t["algorithm"], t["steps"], t["num_examples"], t["kl_mean"], t["entropy_mean"]) == ("grpo", 1, 6, 0.02, 1.5)
    assert t["metrics"] == {
        "train/kl/mean": 0.02,
        "train/entropy/mean": 1.5,
        "train/loss": -0.25,
    }  # the per-step list is left out
    assert round_training(store, "c1-r2") is None


def test_round_training_has_no_kl_for_rft(tmp_path):
    db = tmp_path / "rft.duckdb"
    init_db(db)
    with transaction(db) as con:
        insert_rows(
            con,
            "training_runs",
            [
                dict(
                    training_run_id="t",
                    round_id="r",
                    algorithm="rft",
                    input_checkpoint_id="B",
                    output_checkpoint_id="C",
                    num_examples=3,
                    config_json="{}",
                    metrics_json=json.dumps({"train/kl/mean": 9.0, "train/loss": 1.0}),
                    started_at=T0,
                    finished_at=T0,
                )
            ],
        )
        t = round_training(con, "r")
    assert t["kl_mean"] is None and t["entropy_mean"] is None and t["metrics"]["train/loss"] == 1.0


def test_pass1_history_and_campaigns(store):
    h = pass1_history(store, "one")
    assert [(r["round_index"], r["status"], r["decision"], r["kept_pass1"]) for r in h] == [
        (1, "completed", "promote", 1.0),
        (2, "failed", None, None),
    ]
    assert pass1_history(store, "two") == [] and pass1_history(store, "nope") == []
    cs = report_campaigns(store)
    assert [(c["name"], c["algorithm"], c["rounds"]) for c in cs] == [("one", "grpo", 2), ("two", "rft", 0)]
    assert [c["name"] for c in report_campaigns(store, "two")] == ["two"]


def test_multi_step_round_reports_its_last_step(tmp_path):
    """A GRPO round of 2 on-policy steps: the candidate and the metrics are the last step's, examples add up."""
    db = tmp_path / "steps.duckdb"
    init_db(db)
    with transaction(db) as con:
        insert_rows(
            con,
            "rounds",
            [dict(round_id="r", campaign_id="c", round_index=1, incumbent_checkpoint_id="B", status="running", started_at=T0)],
        )
        insert_rows(
            con,
            "training_runs",
            [
                dict(
                    training_run_id=f"t{k}",
                    round_id="r",
                    step=k,
                    algorithm="grpo",
                    input_checkpoint_id="B",
                    output_checkpoint_id=f"S{k}",
                    num_examples=4,
                    config_json="{}",
                    metrics_json=json.dumps({"train/kl/mean": 0.1 * (k + 1)}),
                    started_at=T0,
                    finished_at=T0 + timedelta(minutes=k),
                )
                for k in (1, 0)
            ],
        )
        insert_rows(
            con,
            "evaluations",
            [
                dict(
                    evaluation_id=c,
                    round_id="r",
                    checkpoint_id=c,
                    eval_set_id=ES,
                    metric="heldout/pass@1",
                    value=v,
                    num_prompts=2,
                    created_at=T0,
                )
                for c, v in [("B", 0.5), ("S0", 0.0), ("S1", 1.0)]
            ],
        )
        insert_rows(con, "trajectories", [_traj("e", "h1", "B", "eval_greedy", 0, 3, round_id="r", eval_set=ES)])
        t = round_training(con, "r")
        evals = round_evaluations(con, "r")
    assert (t["steps"], t["num_examples"], t["kl_mean"]) == (2, 8, pytest.approx(0.2))
    assert [(e["role"], e["checkpoint_id"], e["value"]) for e in evals] == [("incumbent", "B", 0.5), ("candidate", "S1", 1.0)]


def test_base_pass1_is_each_campaigns_own_eval_set(tmp_path):
    """Two campaigns share a store and a base model but evaluate it on different prompts: each table shows its own
    base pass@1, not the first one the store holds (issue 24, finding 9)."""
    from ratchet.store.read.reports import campaign_table, sweep_summary

    db = tmp_path / "s.duckdb"
    init_db(db)
    gate = dict(decision="reject", reason="r", candidate_checkpoint_id="X", incumbent_checkpoint_id="B", test="t")
    gate |= dict(incumbent_pass1=0.0, best_promoted_pass1=0.0, tolerance=0.0, created_at=T0)
    with transaction(db) as con:
        insert_rows(
            con,
            "campaigns",
            [
                dict(campaign_id=cid, name=name, base_checkpoint_id="B", config_json="{}", created_at=T0 + timedelta(hours=h))
                for cid, name, h in [("ca", "easy", 0), ("cb", "hard", 1), ("cc", "old", 2)]
            ],
        )
        insert_rows(
            con,
            "evaluations",
            [
                dict(evaluation_id=f"e{es}", round_id=rid, checkpoint_id="B", eval_set_id=es, metric="heldout/pass@1", value=v)
                | dict(num_prompts=10, created_at=T0 + timedelta(minutes=m))
                for es, rid, v, m in [("ES-easy", "ca-r1", 0.9, 0), ("ES-hard", "cb-r1", 0.1, 5), ("ES-old", "cc-r1", 0.4, 9)]
            ],
        )
        insert_rows(
            con,
            "gate_decisions",
            [
                {**gate, "round_id": "ca-r1", "campaign_id": "ca", "eval_set_id": "ES-easy"},
                {**gate, "round_id": "cb-r1", "campaign_id": "cb", "eval_set_id": "ES-hard"},
                {**gate, "round_id": "cc-r1", "campaign_id": "cc", "eval_set_id": None},  # a gate row from before eval sets
            ],
        )
    with connect(db, read_only=True) as con:
        assert [campaign_table(con, n)[0] for n in ("easy", "hard", "old")] == [0.9, 0.1, 0.4]
        assert [r["base_pass1"] for r in sweep_summary(con, ["hard", "easy"])] == [0.1, 0.9]
