"""An edited plugin file is a verifier change: the gate re-verifies the incumbent's stored evaluation with the new
version before it compares (``carry_over``), as on a release of the built-in verifiers. Store rows only."""

import json

from ratchet.flows.rounds.campaign import gate, prepare_campaign, start_round
from ratchet.loop.campaign.round_context import load_ctx, now, short_hash
from ratchet.store.db import query, transaction
from ratchet.store.ingest import insert_rows
from tests.flows.rounds.gating.test_gate_replay import _base, config

BUGGY = "def verify(completion, record):\n    return completion == 'Answer: ' + record['reference'] and len(completion) < 0\n"
FIXED = "def verify(completion, record):\n    return completion == 'Answer: ' + record['reference']\n"


def store_evaluation(path, checkpoint, solved, right):
    """Greedy evaluations of ``checkpoint`` under the campaign's current verifier version: the completion is right
    where ``solved(i)``; the stored verdict says ``right(i)`` (what the verifier of that version judged)."""
    ctx = load_ctx(path, 1)
    es, ts, version = ctx.eval_set_id(), now(), ctx.verifier_version
    trajs, verdicts = [], []
    for i, p in enumerate(ctx.heldout()):
        tid = short_hash(es, p.prompt_id, checkpoint, "eval_greedy", 0)
        text = f"Answer: {p.answer}" if solved(i) else "Answer: 0"
        trajs.append(dict(trajectory_id=tid, round_id="r", prompt_id=p.prompt_id, checkpoint_id=checkpoint,
                          purpose="eval_greedy", eval_set_id=es, sample_index=0, completion=text, prompt_tokens=1,
                          completion_tokens=3, finish_reason="stop", backend="transformers", temperature=0.0, top_p=1.0,
                          max_new_tokens=8, seed=0, created_at=ts))  # fmt: skip
        verdicts.append(dict(trajectory_id=tid, verifier="plugin:own_checks:verify", verifier_version=version,
                             reward=float(right(i)), correct=right(i), reason="ok" if right(i) else "wrong", parsed=None,
                             format_ok=None, latency_s=0.0, created_at=ts))  # fmt: skip
    with transaction(ctx.db) as con:
        insert_rows(con, "checkpoints", [dict(checkpoint_id=checkpoint, parent_id=None, training_run_id=None, model_ref="x",
                                              path=None, created_at=ts)])  # fmt: skip
        insert_rows(con, "trajectories", trajs)
        insert_rows(con, "verdicts", verdicts)
    return version


def test_an_edited_plugin_makes_the_gate_reverify_the_incumbent(tmp_path, smollm2_dir):
    (tmp_path / "own_checks.py").write_text(BUGGY)
    tasks = tmp_path / "own.jsonl"
    rows = [{"prompt": f"[own] What is {a} + {b}?", "reference": str(a + b)} for a in range(1, 31) for b in range(1, 31)]
    tasks.write_text("\n".join(json.dumps(r) for r in rows))
    source = {"path": str(tasks), "verifier": "own_checks:verify", "plugin_dir": str(tmp_path)}
    path = config(tmp_path, smollm2_dir, **{"tasks.sources": [source], "tasks.heldout_prompts": 200})
    prepare_campaign.fn(str(path))
    base = _base(load_ctx(path))
    old = store_evaluation(path, base, solved=lambda i: i < 140, right=lambda i: False)  # the buggy plugin's view
    (tmp_path / "own_checks.py").write_text(FIXED)  # the user fixes the plugin: a new version
    inc = start_round.fn(str(path), 1)
    new = store_evaluation(path, "cand1", solved=lambda i: i < 100, right=lambda i: i < 100)
    assert new != old and "+plugins[plugin:own_checks:verify=0+" in new
    d = gate.fn(str(path), 1, inc, "cand1")  # the base's evaluation is re-verified by the fixed plugin first
    assert d["decision"] == "reject" and "0.700 -> 0.500" in d["reason"]
    got = query(load_ctx(path).db, """SELECT v.verifier_version, count(*), sum(v.correct::INT) FROM trajectories t
                JOIN verdicts v USING (trajectory_id) WHERE t.checkpoint_id = ? GROUP BY ALL ORDER BY 1""", [base])[1]  # fmt: skip
    assert sorted(got) == sorted([(old, 200, 0), (new, 200, 140)])
