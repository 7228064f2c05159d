"""Gold-label audit: a planted wrong gold is flagged, by the query and by `ratchet audit-gold`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.store.db import connect, init_db, transaction
from ratchet.store.ingest import insert_rows
from ratchet.store.read.reports import gold_audit

NOW = datetime.now(UTC)


def traj(tid, prompt, round_id, sample, purpose="rollout"):
    return dict(
        trajectory_id=tid, round_id=round_id, prompt_id=prompt, checkpoint_id="c0", purpose=purpose, eval_set_id=None,
        sample_index=sample, completion=f"Answer: {tid}", prompt_tokens=10, completion_tokens=5, finish_reason="stop",
        backend="transformers", temperature=0.8, top_p=1.0, max_new_tokens=32, seed=0, created_at=NOW,
    )  # fmt: skip


def verdict(tid, parsed, correct, version="v1", at=NOW):
    return dict(
        trajectory_id=tid, verifier="composite", verifier_version=version, reward=1.1 if correct else 0.1,
        correct=correct, reason="ok" if correct else ("wrong" if parsed else "no_answer"), parsed=parsed,
        format_ok=True, latency_s=0.001, created_at=at,
    )  # fmt: skip


# (prompt, gold, campaign id, [(round, parsed, correct), ...])
SAMPLES = [
    # planted wrong gold: 17 + 25 is 42, the data says 41; 5 of 6 samples across two rounds answer 42
    ("bad", "41", "ca", [("r1", "42", False)] * 3 + [("r1", "41", True)] + [("r2", "42", False)] * 2),
    ("ok", "7", "ca", [("r1", "7", True)] * 5 + [("r1", "8", False)]),
    ("split", "9", "ca", [("r1", "5", False)] * 2 + [("r1", "6", False)] * 2),  # 50%: no consensus
    ("few", "3", "ca", [("r1", "4", False)] * 2),  # too few samples
    ("noans", "2", "ca", [("r1", None, False)] * 6),  # no parsed answer: nothing to agree on
    ("other", "1", "cb", [("r1", "2", False)] * 4),  # another campaign
]


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "g.duckdb"
    init_db(path)
    prompts, trajs, verdicts = [], [], []
    for prompt, gold, cid, samples in SAMPLES:
        prompts.append(dict(prompt_id=prompt, source="s", task="sum", question=f"q {prompt}?", answer=gold, split="train"))
        for i, (rnd, parsed, correct) in enumerate(samples):
            tid = f"{prompt}-{i}"
            trajs.append(traj(tid, prompt, f"{cid}-{rnd}", i, purpose="rollout" if i % 3 else "eval_sample"))
            verdicts.append(verdict(tid, parsed, correct))
    # A newer verifier version re-judged one "ok" sample: the newest verdict counts.
    verdicts.append(verdict("ok-5", "7", True, version="v2", at=NOW + timedelta(seconds=1)))
    with transaction(path) as con:
        insert_rows(con, "prompts", prompts)
        insert_rows(con, "trajectories", trajs)
        insert_rows(con, "verdicts", verdicts)
        insert_rows(
            con,
            "campaigns",
            [
                dict(campaign_id=c, name=n, base_checkpoint_id="c0", config_json="{}", created_at=NOW)
                for c, n in [("ca", "A"), ("cb", "B")]
            ],
        )
    return path


def test_planted_wrong_gold_is_flagged(db):
    with connect(db, read_only=True) as con:
        rows = gold_audit(con, campaign="A", min_share=0.75, min_samples=4)
    assert [(r["prompt_id"], r["gold"], r["majority_answer"], r["votes"], r["samples"], r["rounds"]) for r in rows] == [
        ("bad", "41", "42", 5, 6, 2)
    ]
    assert rows[0]["share"] == pytest.approx(5 / 6) and rows[0]["correct_samples"] == 1


def test_thresholds_and_campaigns(db):
    with connect(db, read_only=True) as con:
        assert {r["prompt_id"] for r in gold_audit(con, campaign="A", min_share=0.5)} == {"bad", "split"}
        assert {r["prompt_id"] for r in gold_audit(con, campaign="A", min_share=0.75, min_samples=2)} == {"bad", "few"}
        assert {(r["campaign"], r["prompt_id"]) for r in gold_audit(con)} == {("A", "bad"), ("B", "other")}
        assert gold_audit(con, campaign="A", min_share=0.9) == []
        with pytest.raises(ValueError, match=r"min_share \(1.5\) must be in \(0, 1\]"):
            gold_audit(con, min_share=1.5)


def test_cli_exits_0_with_findings(db):
    runner = CliRunner()
    r = runner.invoke(app, ["audit-gold", "--db", str(db), "--campaign", "A", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [(f["prompt_id"], f["gold"], f["majority_answer"]) for f in doc["findings"]] == [("bad", "41", "42")]
    r = runner.invoke(app, ["audit-gold", "--db", str(db), "--min-share", "0.6"])
    assert r.exit_code == 0 and "q bad?" in r.stdout and "5/6" in r.stdout


def test_cli_bad_input_is_one_line(db, tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["audit-gold", "--db", str(db), "--min-share", "0"])
    assert r.exit_code == 2 and "min_share (0.0) must be in (0, 1]" in r.output
    r = runner.invoke(app, ["audit-gold", "--db", str(tmp_path / "none.duckdb")])
    assert r.exit_code == 2 and "does not exist" in r.output


def test_eval_sample_verdicts_feed_sampled_metrics(tmp_path):
    from ratchet.loop.evaluation.metrics import sampled_metrics
    from ratchet.store.queries import eval_sample_verdicts

    path = tmp_path / "e.duckdb"
    init_db(path)
    trajs, verdicts = [], []
    for prompt, answers in [("p1", ["8", "7", "7"]), ("p2", ["5", None, "5"])]:  # gold 7 for both
        for i, a in reversed(list(enumerate(answers))):  # stored out of order: the query orders by sample index
            t = traj(f"{prompt}-{i}", prompt, "ca-r1", i, purpose="eval_sample") | {"eval_set_id": "es"}
            trajs.append(t)
            verdicts.append(verdict(t["trajectory_id"], a, a == "7"))
    trajs.append(traj("p1-greedy", "p1", "ca-r1", 0, purpose="eval_greedy") | {"eval_set_id": "es"})
    verdicts.append(verdict("p1-greedy", "7", True))
    with transaction(path) as con:
        insert_rows(con, "trajectories", trajs)
        insert_rows(con, "verdicts", verdicts)
    with connect(path, read_only=True) as con:
        per_prompt = eval_sample_verdicts(con, "c0", "es", "v1")
    assert per_prompt == [
        [("8", False, 0.1), ("7", True, 1.1), ("7", True, 1.1)],
        [("5", False, 0.1), (None, False, 0.1), ("5", False, 0.1)],
    ]
    m = sampled_metrics(per_prompt, [1, 3])
    assert (m["heldout/maj@1"], m["heldout/maj@3"], m["heldout/best_of_n@3"]) == (0.0, 0.5, 0.5)
