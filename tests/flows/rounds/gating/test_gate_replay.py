"""The gate stage on a real store (per-eval-set decisions, recorded rule and settings) and `ratchet gate replay`.

The rounds' evaluations are written as store rows with chosen per-prompt verdicts (no model calls: what is tested is
the gate stage and the replay reading them back); the campaign, its rounds and its pinned eval set are made by the
real round tasks.
"""

import json

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.flows.rounds.campaign import gate, prepare_campaign, start_round
from ratchet.flows.rounds.gating.gate_replay import replay
from ratchet.loop.campaign.round_context import load_ctx, now, save_config, short_hash
from ratchet.loop.config import load_config
from ratchet.store.db import query, transaction
from ratchet.store.ingest import insert_rows
from ratchet.verifiers.reward import VERSION


def write_tasks(folder, name, lo, hi):
    path = folder / f"{name}.jsonl"
    lines = [{"question": f"[{name}] What is {a} + {b}?", "answer": str(a + b)} for a in range(lo, hi) for b in range(1, 31)]
    path.write_text("\n".join(json.dumps(x) for x in lines))
    return path


def config(tmp_path, model_dir, **over):
    base = {
        "db": str(tmp_path / "g.duckdb"),
        "campaign": "gated",
        "model.name_or_path": str(model_dir),
        "tasks.heldout_fraction": 0.3,
        "tasks.fewshot": 0,
        "retention.enabled": False,
        "gate.max_consecutive_rejections": 3,
    }
    return save_config(load_config(None, **{**base, **over}))


def evaluate_as(path, round_index, checkpoint, solved, *, prompts=None, eval_set_id=None):
    """Store greedy evaluations of ``checkpoint`` on the campaign's eval set (or on ``prompts`` as ``eval_set_id``):
    right on prompts where ``solved(i, prompt)`` (the gold, else the gold + 1: answers as varied as the golds, so the
    same-answer monitor stays quiet)."""
    ctx = load_ctx(path, round_index)
    es, ts = eval_set_id or ctx.eval_set_id(), now()
    trajs, verdicts = [], []
    for i, p in enumerate(ctx.heldout() if prompts is None else prompts):
        tid = short_hash(es, p.prompt_id, checkpoint, "eval_greedy", 0)
        ok = bool(solved(i, p))
        said = p.answer if ok else str(int(p.answer) + 1)
        trajs.append(dict(trajectory_id=tid, round_id=ctx.round_id, prompt_id=p.prompt_id, checkpoint_id=checkpoint,
                          purpose="eval_greedy", eval_set_id=es, sample_index=0, completion=f"Answer: {said}", prompt_tokens=1,
                          completion_tokens=1, finish_reason="stop", backend="transformers", temperature=0.0, top_p=1.0,
                          max_new_tokens=8, seed=0, created_at=ts))  # fmt: skip
        verdicts.append(dict(trajectory_id=tid, verifier="math", verifier_version=VERSION, reward=float(ok), correct=ok,
                             reason="correct" if ok else "wrong", parsed=said, format_ok=True, latency_s=0.0, created_at=ts))  # fmt: skip
    with transaction(ctx.db) as con:
        insert_rows(con, "checkpoints", [dict(checkpoint_id=checkpoint, parent_id=None, training_run_id=None, model_ref="x",
                                              path=None, created_at=ts)])  # fmt: skip
        insert_rows(con, "trajectories", trajs)
        insert_rows(con, "verdicts", verdicts)


def run_round(path, r, solved):
    inc = start_round.fn(str(path), r)
    cand = f"cand{r}"
    evaluate_as(path, r, cand, solved)
    return gate.fn(str(path), r, inc, cand)


@pytest.fixture
def gated_store(tmp_path, tiny_model_dir):
    tasks = write_tasks(tmp_path, "sums", 1, 31)
    path = config(tmp_path, tiny_model_dir, **{"tasks.source": "jsonl", "tasks.path": str(tasks), "tasks.heldout_prompts": 200})
    prepare_campaign.fn(str(path))
    ctx = load_ctx(path)
    evaluate_as(path, 1, _base(ctx), lambda i, p: i < 100)  # base: 100 of 200
    # round 1: +20 points, nothing lost; round 2: +2 points with 20 disagreements (12 gained, 8 lost): unproven at
    # margin 0, no worse than -0.03; round 3: -15 points
    decisions = [
        run_round(path, 1, lambda i, p: i < 140),
        run_round(path, 2, lambda i, p: (i < 140 and not 132 <= i < 140) or 140 <= i < 152),
        run_round(path, 3, lambda i, p: i < 114),
    ]
    return path, ctx, decisions


def _base(ctx):
    return query(ctx.db, "SELECT base_checkpoint_id FROM campaigns")[1][0][0]


def test_gate_records_rule_settings_and_bounds(gated_store):
    path, ctx, decisions = gated_store
    assert [d["decision"] for d in decisions] == ["promote", "promote", "reject"]
    rows = query(ctx.db, "SELECT rule, settings_json, lower_bound, error_rates_json FROM gate_decisions ORDER BY round_id")[1]
    assert all(r[0] == "noninferiority" and json.loads(r[1])["margin"] == 0.03 for r in rows)
    assert -0.03 <= rows[1][2] < 0 < rows[0][2] and rows[2][2] < -0.03
    assert json.loads(rows[0][3])["eval_prompts"] == 200
    sets = query(ctx.db, "SELECT eval_name, role, num_prompts, passed FROM gate_set_decisions ORDER BY round_id")[1]
    assert sets == [("heldout", "gate", 200, True), ("heldout", "gate", 200, True), ("heldout", "gate", 200, False)]


def test_replay_reproduces_stored_decisions_and_shows_a_margin_change(gated_store):
    path, ctx, _ = gated_store
    same = replay(ctx.db, "gated")
    assert [r["replayed"] for r in same] == [r["stored"] for r in same] == ["promote", "promote", "reject"]
    assert not any(r["changed"] for r in same)
    out = CliRunner().invoke(
        app, ["gate", "replay", "--db", str(ctx.db), "--campaign", "gated", "--set", "gate.margin=0.0", "--format", "json"]
    )
    assert out.exit_code == 0, out.output
    got = json.loads(out.output)
    assert got["changed"] == [2] and got["rounds"][1]["replayed"] == "reject"
    assert "-margin 0.0" in got["rounds"][1]["reason"]
    # `gate plan --db` measures the discordance of the stored decisions: 40, 20 and 30 of 200 prompts
    plan = CliRunner().invoke(
        app, ["gate", "plan", "--eval-prompts", "200", "--db", str(ctx.db), "--trials", "50", "--format", "json"]
    )
    assert plan.exit_code == 0, plan.output
    assert json.loads(plan.output)["discordance"] == pytest.approx(0.15)
    bad = CliRunner().invoke(app, ["gate", "replay", "--db", str(ctx.db), "--campaign", "gated", "--set", "sft.lr=1"])
    assert bad.exit_code == 2 and "gate." in bad.output


def test_a_regressing_source_rejects_the_round_by_name(tmp_path, tiny_model_dir):
    sources = [
        {"path": str(write_tasks(tmp_path, "alpha", 1, 31)), "name": "alpha", "format": "math"},
        {"path": str(write_tasks(tmp_path, "beta", 31, 61)), "name": "beta", "format": "math"},
    ]
    path = config(tmp_path, tiny_model_dir, **{"tasks.sources": sources, "tasks.heldout_prompts": 300})
    prepare_campaign.fn(str(path))
    ctx = load_ctx(path)
    evaluate_as(path, 1, _base(ctx), lambda i, p: i % 2 == 0)
    # alpha: every prompt right (a big gain); beta: every prompt wrong (a big drop); pooled pass@1 rises
    d = run_round(path, 1, lambda i, p: p.source == "alpha" or (i % 2 == 0 and i % 10 == 0))
    assert d["decision"] == "reject" and d["reason"].startswith("beta: ") and "alpha" not in d["reason"]
    rows = dict(query(ctx.db, "SELECT eval_name, passed FROM gate_set_decisions")[1])
    assert rows == {"alpha": True, "beta": False}
    pooled = query(ctx.db, "SELECT delta FROM gate_decisions")[1][0][0]
    assert pooled > 0  # the pooled figure says better; the per-source gate still rejects
