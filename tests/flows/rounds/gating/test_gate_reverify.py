"""The gate compares outcomes of one verifier version: a checkpoint evaluated under an older verifier has its stored
completions re-verified (``carry_over``) before the gate or the evaluate stage uses them, instead of being skipped or
generated again. Store rows only (no model calls), on the real round tasks."""

from ratchet.flows.rounds.campaign import gate, prepare_campaign, start_round
from ratchet.flows.rounds.stages.pipeline import evaluate
from ratchet.loop.campaign.round_context import load_ctx, now, short_hash
from ratchet.store.db import query, transaction
from ratchet.store.ingest import insert_rows
from ratchet.verifiers.reward import VERSION
from tests.flows.rounds.gating.test_gate_replay import _base, config, evaluate_as, write_tasks

OLD = "composite-0.9[math-0.9]"  # a verifier version before this one


def evaluate_under_old_verifier(path, checkpoint):
    """Completions of ``checkpoint`` on the eval set's id under ``OLD``: right on the first 140 prompts, but the old
    verifier (the bug the new version fixed) marked only the first 100 right."""
    ctx = load_ctx(path, 1)
    es, ts = ctx.eval_set_id(verifier=OLD), now()
    trajs, verdicts = [], []
    for i, p in enumerate(ctx.heldout()):
        tid = short_hash(es, p.prompt_id, checkpoint, "eval_greedy", 0)
        text = f"Answer: {p.answer}" if i < 140 else "Answer: 0"
        trajs.append(dict(trajectory_id=tid, round_id="old", prompt_id=p.prompt_id, checkpoint_id=checkpoint,
                          purpose="eval_greedy", eval_set_id=es, sample_index=0, completion=text, prompt_tokens=1,
                          completion_tokens=3, finish_reason="stop", backend="transformers", temperature=0.0, top_p=1.0,
                          max_new_tokens=8, seed=0, created_at=ts))  # fmt: skip
        verdicts.append(dict(trajectory_id=tid, verifier="math", verifier_version=OLD, reward=float(i < 100),
                             correct=i < 100, reason="old", parsed="1", format_ok=True, latency_s=0.0, created_at=ts))  # fmt: skip
    with transaction(ctx.db) as con:
        insert_rows(con, "checkpoints", [dict(checkpoint_id=checkpoint, parent_id=None, training_run_id=None, model_ref="x",
                                              path=None, created_at=ts)])  # fmt: skip
        insert_rows(con, "trajectories", trajs)
        insert_rows(con, "verdicts", verdicts)


def test_an_evaluation_under_an_older_verifier_is_reverified_before_the_gate_compares(tmp_path, smollm2_dir):
    tasks = write_tasks(tmp_path, "sums", 1, 31)
    path = config(tmp_path, smollm2_dir, **{"tasks.source": "jsonl", "tasks.path": str(tasks), "tasks.heldout_prompts": 200})
    prepare_campaign.fn(str(path))
    ctx = load_ctx(path)
    base = _base(ctx)
    evaluate_under_old_verifier(path, base)
    inc = start_round.fn(str(path), 1)
    # the candidate solves what the old verifier credited the base with: +0 under the old verdicts' view of the base
    # would be "equal"; against the base's re-verified outcomes (0.70) it is 20 points worse
    evaluate_as(path, 1, "cand1", lambda i, p: i < 100)
    d = gate.fn(str(path), 1, inc, "cand1")  # no evaluate stage ran for the base: the gate re-verifies it
    assert d["decision"] == "reject" and "0.700 -> 0.500" in d["reason"]
    got = query(ctx.db, """SELECT v.verifier_version, count(*), sum(v.correct::INT) FROM trajectories t
                           JOIN verdicts v USING (trajectory_id) WHERE t.checkpoint_id = ? GROUP BY ALL ORDER BY 1""",
                [base])[1]  # fmt: skip
    assert got == sorted([(OLD, 200, 100), (VERSION, 200, 140)])
    pairs = query(ctx.db, "SELECT count(DISTINCT (prompt_id, completion)) FROM trajectories WHERE checkpoint_id = ?", [base])
    assert pairs[1][0][0] == 200  # the same completions, copied onto the current eval set and re-scored
    # the evaluate stage does the same for a checkpoint it is asked to evaluate, instead of generating again
    evaluate_under_old_verifier(path, "other")
    metrics = evaluate.fn(str(path), 1, "other")
    assert metrics["heldout/pass@1"] == 0.7
    assert query(ctx.db, "SELECT count(*) FROM trajectories WHERE checkpoint_id = 'other'")[1][0][0] == 400
