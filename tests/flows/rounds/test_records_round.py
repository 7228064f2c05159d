"""A real round (Prefect flows, DuckDB, transformers, SFT) on a mixed campaign: a math file and a records file judged
by the user's own verifier, some of whose calls fail. The tiny model answers every question 'Answer: 7'."""

import json

import pytest

from ratchet.loop.campaign.round_context import load_ctx, save_config
from ratchet.loop.config import load_config
from ratchet.store.db import query
from tests.flows.rounds.test_round import assert_lineage, write_sum_tasks

CHECKS = """
def verify(completion, record):
    if record.get("explode"):
        raise RuntimeError("cannot judge this one")
    return completion.strip().endswith(record["reference"])
"""


@pytest.mark.slow  # ~26 s on 2 cores (plus the Prefect harness): kept out of the default suite's budget
def test_a_round_with_a_records_source_and_its_own_verifier(prefect_harness, tmp_path, tiny_model_dir):
    from ratchet.flows.rounds.campaign import run_campaign

    (tmp_path / "own_checks.py").write_text(CHECKS)
    own = tmp_path / "own.jsonl"
    rows = [
        {"prompt": [{"role": "user", "content": f"What is {a} plus {b} minus {a + b - 7}?"}], "reference": "7", "explode": a <= 3}
        for a in range(1, 9)
        for b in range(1, 9)
    ]
    own.write_text("\n".join(json.dumps(r) for r in rows))
    sources = [
        {"name": "sums", "path": str(write_sum_tasks(tmp_path)), "system_prompt": "sys"},
        {"name": "own", "path": str(own), "verifier": "own_checks:verify", "plugin_dir": str(tmp_path), "system_prompt": "sys"},
    ]
    cfg = load_config(
        None,
        **{
            "db": str(tmp_path / "r.duckdb"),
            "campaign": "own",
            "max_rounds": 1,
            "model.name_or_path": str(tiny_model_dir),
            "tasks.sources": sources,
            "tasks.heldout_fraction": 0.3,
            "tasks.fewshot": 0,
            "tasks.train_prompts_per_round": 12,
            "tasks.heldout_prompts": 10,
            "generation.group_size": 2,
            "generation.max_new_tokens": 6,
            "sft.epochs": 1,
            "eval.num_samples": 1,
            "eval.ks": [1],
        },
    )
    path = save_config(cfg)
    (decision,) = run_campaign(path)
    assert decision["decision"] in ("promote", "reject")
    ctx = load_ctx(path)
    db = ctx.db
    assert_lineage(db)
    got = query(db, """SELECT p.source, v.verifier, v.verifier_version, v.reason, v.read_chars, t.prompt_messages, t.purpose
                       FROM verdicts v JOIN trajectories t USING (trajectory_id) JOIN prompts p USING (prompt_id)""")[1]  # fmt: skip
    assert {r[2] for r in got} == {ctx.verifier_version} and "+plugins[plugin:own_checks:verify=0+" in ctx.verifier_version
    assert {(r[0], r[1]) for r in got} == {("sums", "math"), ("own", "plugin:own_checks:verify")}
    own_rows = [r for r in got if r[0] == "own"]
    assert {r[6] for r in own_rows} >= {"rollout", "eval_greedy"}  # trained on and evaluated
    msgs = json.loads(own_rows[0][5])
    assert msgs[0] == {"role": "system", "content": "sys"} and msgs[1]["content"].startswith("What is ")
    errors = [r for r in own_rows if r[3] == "verifier_error"]
    assert errors and all(r[4] == 0 for r in errors)  # nothing read: nothing trained on
    assert any(r[3] == "ok" for r in own_rows)  # the tiny model's 'Answer: 7' on a sum of 7
    trained = query(db, """SELECT count(*) FROM training_examples JOIN verdicts v USING (trajectory_id)
                           WHERE v.reason = 'verifier_error'""")[1][0][0]  # fmt: skip
    assert trained == 0
    assert query(db, "SELECT count(*) FROM prompts WHERE source = 'own' AND record_json IS NULL")[1][0][0] == 0
    manifest = json.loads(query(db, "SELECT verifier_versions_json FROM round_manifests")[1][0][0])
    assert manifest["campaign"] == ctx.verifier_version and manifest["plugin:own_checks:verify"].startswith("0+")
