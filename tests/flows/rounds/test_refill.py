"""The generate stage's refill (grpo.max_oversample, DAPO dynamic sampling) on a real store, with a fake engine.

Only the engine is faked (``stages.batch_rollouts``, what the stage calls to sample): it answers a prompt right on
both samples when its gold is even (a zero-variance group) and right on one of two otherwise. Selection, refill,
verification, the Parquet files and the store's rows are the real ones.
"""

from datetime import UTC, datetime

from ratchet.flows.rounds.stages import pipeline as stages
from ratchet.flows.rounds.stages.rollout_batches import Batched
from ratchet.loop.campaign.round_context import load_ctx, save_config
from ratchet.loop.config import RatchetConfig
from ratchet.loop.generation.sampling import Completion
from ratchet.store.db import connect, init_db, transaction
from ratchet.store.ingest import insert_rows

NOW = datetime.now(UTC)


def _fake_batches(ctx, engine, policy, prompts, params, desc, stage_dir, to_rows):
    return Batched(to_rows(_fake_rollouts(prompts, params)), 1, 0)


def _fake_rollouts(prompts, params):
    comps = []
    for i, p in enumerate(prompts):
        for k in range(params.n):
            right = int(p.answer) % 2 == 0 or k == 0
            text = f"Answer: {p.answer if right else int(p.answer) + 1}"
            comps.append(Completion(i, k, text, (1, 2, 3), 10, "stop", (-0.1, -0.1, -0.1) if params.logprobs else None))
    return comps


def _campaign(tmp_path, **over) -> str:
    cfg = RatchetConfig.model_validate(
        {
            "campaign": "refill",
            "db": str(tmp_path / "r.duckdb"),
            "algorithm": "grpo",
            "tasks": {"train_prompts_per_round": 8, "heldout_prompts": 8, "selection": "frontier"},
            "generation": {"group_size": 2, "max_new_tokens": 8},
            "grpo": {"steps_per_round": 2, "mini_batch_size": 8, "micro_batch_size": 8, **over},
        }
    )
    path = save_config(cfg)
    ctx = load_ctx(path, 1)
    init_db(cfg.db)
    with transaction(cfg.db) as con:
        insert_rows(con, "campaigns", [dict(campaign_id=ctx.campaign_id, name="refill", base_checkpoint_id="b", config_json="{}", created_at=NOW)])  # fmt: skip
        insert_rows(con, "rounds", [dict(round_id=ctx.round_id, campaign_id=ctx.campaign_id, round_index=1, incumbent_checkpoint_id="b", status="running", started_at=NOW)])  # fmt: skip
    return str(path)


def test_refill_replaces_zero_variance_groups_within_max_oversample(tmp_path, monkeypatch):
    monkeypatch.setattr(stages, "batch_rollouts", _fake_batches)
    path = _campaign(tmp_path, max_oversample=0.5)  # at most 4 refill prompts in the round, 2 per step
    for step in (0, 1):
        stages.generate.fn(path, 1, step, "b", None)
        stages.verify.fn(path, 1, step)
    ctx = load_ctx(path, 1)
    with connect(ctx.db, read_only=True) as con:
        picks = con.execute("SELECT step, pick, refill_pass, prompt_id FROM round_prompts ORDER BY step, position").fetchall()
        groups = con.execute(
            """SELECT coalesce(t.step, 0), t.prompt_id, min(v.reward) < max(v.reward) FROM trajectories t
               JOIN verdicts v USING (trajectory_id) GROUP BY ALL"""
        ).fetchall()
    refills = [p for p in picks if p[2] > 0]
    assert len([p for p in picks if p[2] == 0]) == 8 and 0 < len(refills) <= 4
    assert all(p[1] == "reserve" for p in refills) and all(p[1] != "reserve" for p in picks if p[2] == 0)
    for step in (0, 1):
        mine = [p for p in picks if p[0] == step]
        kept = sum(ok for s, _, ok in groups if s == step)
        assert len([p for p in mine if p[2] > 0]) <= 2 and kept <= 4  # never more groups with signal than the batch
        # it stops when the batch is full or the step's reserve is spent, and never refills a full batch
        refilled = len([p for p in mine if p[2] > 0])
        assert kept == 4 or refilled == 2
        first_kept = sum(ok for s, pid, ok in groups if s == step and pid in {p[3] for p in mine if p[2] == 0})
        assert refilled == 0 if first_kept == 4 else refilled >= 1
    assert {pid for _, pid, _ in groups} == {p[3] for p in picks}  # every sampled prompt is in round_prompts
    assert len({p[3] for p in picks}) == len(picks)


def test_without_max_oversample_nothing_is_refilled(tmp_path, monkeypatch):
    monkeypatch.setattr(stages, "batch_rollouts", _fake_batches)
    path = _campaign(tmp_path)
    stages.generate.fn(path, 1, 0, "b", None)
    ctx = load_ctx(path, 1)
    assert not (ctx.stage_dir("generate") / "verdicts.parquet").exists()  # the verify stage verifies, as before
    with connect(ctx.db, read_only=True) as con:
        assert con.execute("SELECT count(*), max(refill_pass), any_value(selection) FROM round_prompts").fetchone() == (4, 0, "frontier")  # fmt: skip
