"""A GRPO round whose engine and learner stay loaded for all on-policy steps: one checkpoint, lineage, resume."""

import pytest

from ratchet.loop.campaign.round_context import load_ctx, save_config
from ratchet.loop.config import RatchetConfig, load_config
from ratchet.store.db import query
from tests.flows.rounds.test_round import write_sum_tasks

STEPS = 8  # enough steps for a chain of unsaved policies and a crash mid-round (each step costs a few s of round overhead)


@pytest.fixture
def steps_config(tmp_path, tiny_model_dir):
    tasks = write_sum_tasks(tmp_path)
    cfg = load_config(
        None,
        **{
            "db": str(tmp_path / "g.duckdb"),
            "campaign": "persist",
            "algorithm": "grpo",
            "max_rounds": 1,
            "model.name_or_path": str(tiny_model_dir),
            "tasks.source": "jsonl",
            "tasks.path": str(tasks),
            "tasks.heldout_fraction": 0.3,
            "tasks.fewshot": 0,
            "tasks.system_prompt": "sys",
            "tasks.train_prompts_per_round": STEPS,  # one prompt per step
            "tasks.heldout_prompts": 4,
            "generation.group_size": 2,
            "generation.max_new_tokens": 4,
            "generation.temperature": 1.5,  # varied completions, so groups carry signal and the weights move
            "grpo.steps_per_round": STEPS,
            "grpo.dynamic_sampling": False,
            "grpo.mini_batch_size": 2,
            "grpo.micro_batch_size": 2,
            "grpo.lr": 1e-2,
            "gate.max_consecutive_rejections": 3,
            "retention.enabled": False,  # keep a rejected candidate's folder, to count the folders the round wrote
        },
    )
    return save_config(cfg)


def _rows(db) -> dict:
    tables = ("checkpoints", "trajectories", "verdicts", "training_runs", "training_examples", "evaluations")
    return {t: query(db, f"SELECT count(*) FROM {t}")[1][0][0] for t in tables}


@pytest.mark.slow
def test_many_step_round_saves_one_checkpoint_and_resumes(prefect_harness, steps_config):
    """An 8-step GRPO round on CPU writes one checkpoint (the candidate), not 8; every step's policy has a row
    (7 with path NULL, a parent chain from the incumbent) and its rollouts name it. A resumed round replays the
    done steps' training and re-runs the rest: the same candidate, no row inserted twice."""
    from ratchet.flows.rounds.campaign import run_campaign
    from ratchet.flows.rounds.stages.round_engine import round_engine
    from ratchet.flows.rounds.stages.steps import round_steps

    (decision,) = run_campaign(steps_config)
    ctx = load_ctx(steps_config, 1)
    db = ctx.db
    base = query(db, "SELECT base_checkpoint_id FROM campaigns")[1][0][0]
    runs = query(db, "SELECT step, input_checkpoint_id, output_checkpoint_id FROM training_runs ORDER BY step")[1]
    assert [r[0] for r in runs] == list(range(STEPS))  # every step trained (no group dropped)
    paths = dict(query(db, "SELECT checkpoint_id, path FROM checkpoints WHERE checkpoint_id <> ?", [base])[1])
    saved = [c for c, p in paths.items() if p is not None]
    assert len(paths) == STEPS and len(saved) == 1 and saved == [runs[-1][2]]
    assert sorted(p.name for p in ctx.checkpoints_dir.iterdir()) == saved  # one folder of weights for STEPS steps
    assert decision["round"] == 1 and query(db, "SELECT candidate_checkpoint_id FROM gate_decisions")[1][0][0] == saved[0]
    # The chain: step k trains what step k-1 produced; its row names that parent and its training run.
    parents = {c: (p, r) for c, p, r in query(db, "SELECT checkpoint_id, parent_id, training_run_id FROM checkpoints")[1]}
    run_ids = dict(query(db, "SELECT step, training_run_id FROM training_runs")[1])
    policy = base
    for k, inp, out in runs:
        assert inp == policy and parents[out] == (policy, run_ids[k])
        policy = out
    # Step k's rollouts name the policy they were sampled from.
    sampled = query(db, "SELECT step, list(DISTINCT checkpoint_id) FROM trajectories WHERE purpose = 'rollout' GROUP BY 1")[1]
    assert dict(sampled) == {k: [inp] for k, inp, _ in runs}
    before = _rows(db)
    assert run_campaign(steps_config) == [decision] and _rows(db) == before  # a finished round: nothing new

    # A crash during the last step: the last two steps never finished training, the last never generated either.
    for k in (STEPS - 2, STEPS - 1):
        (ctx.at_step(k).stage_dir("train") / "_SUCCESS.json").unlink()
    for stage in ("generate", "verify", "filter"):
        (ctx.at_step(STEPS - 1).stage_dir(stage) / "_SUCCESS.json").unlink()
    incumbent = query(db, "SELECT incumbent_checkpoint_id FROM rounds")[1][0][0]
    with round_engine(ctx, incumbent) as engine:
        assert round_steps(str(steps_config), 1, incumbent, engine) == saved[0]  # replayed on CPU: bit-identical
    assert _rows(db) == before


def test_preflight_refuses_a_dev_shm_too_small_for_the_vllm_weight_push(tiny_model_dir, tmp_path, monkeypatch):
    """A vLLM GRPO round pushes each step's policy through /dev/shm as one file per rank; a /dev/shm smaller
    than that (Docker's default 64 MB) is refused before any work, in one line naming the size it needs."""
    import shutil
    from collections import namedtuple

    from ratchet.flows.rounds.stages import round_engine
    from ratchet.loop.checkpoints import parameter_count
    from ratchet.store.retention import DiskSpaceError

    def cfg(**over) -> RatchetConfig:
        base = {"algorithm": "grpo", "grpo.steps_per_round": 4, "generation.backend": "vllm"}
        return load_config(None, **{**base, **over})

    need = 2 * parameter_count(tiny_model_dir) * 4  # 2 ranks, float32
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(round_engine.shutil, "disk_usage", lambda _p: usage(64 << 20, 0, need - 1))
    with pytest.raises(DiskSpaceError, match=r"has \d+ MiB free.*2 rank\(s\) x float32.*--shm-size=\dg"):
        round_engine.check_weight_sync(cfg(**{"compute.devices": ["cpu", "cpu"]}), tiny_model_dir, tmp_path)
    monkeypatch.setattr(round_engine.shutil, "disk_usage", lambda _p: usage(64 << 20, 0, need))
    round_engine.check_weight_sync(cfg(**{"compute.devices": ["cpu", "cpu"]}), tiny_model_dir, tmp_path)  # fits
    monkeypatch.setattr(round_engine.shutil, "disk_usage", lambda _p: usage(0, 0, 0))
    round_engine.check_weight_sync(cfg(**{"generation.backend": "transformers"}), tiny_model_dir, tmp_path)  # no file
    round_engine.check_weight_sync(cfg(algorithm="rft"), tiny_model_dir, tmp_path)  # no policy pushed per step
    assert shutil.disk_usage is round_engine.shutil.disk_usage
