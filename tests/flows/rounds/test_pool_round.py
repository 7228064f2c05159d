"""The persistent GRPO round on a pool: 2 CPU ranks (gloo) give the 1-rank round's candidate; LoRA in it."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ratchet.loop.campaign.round_context import load_ctx, save_config
from ratchet.loop.config import load_config
from ratchet.store.db import query
from tests.flows.rounds.test_round import write_sum_tasks

STEPS = 3


def _config(root, tiny_model_dir, tasks, **over):
    root.mkdir(parents=True, exist_ok=True)
    cfg = load_config(
        None,
        **{
            "db": str(root / "g.duckdb"),
            "campaign": "pool",
            "algorithm": "grpo",
            "max_rounds": 1,
            "model.name_or_path": str(tiny_model_dir),
            "tasks.source": "jsonl",
            "tasks.path": str(tasks),
            "tasks.heldout_fraction": 0.3,
            "tasks.fewshot": 0,
            "tasks.system_prompt": "sys",
            "tasks.train_prompts_per_round": 2 * STEPS,  # two prompts per step
            "tasks.heldout_prompts": 4,
            "generation.group_size": 2,
            "generation.batch_size": 2,  # a step's 4 rollouts are 2 batches: one per rank
            "generation.max_new_tokens": 4,
            "generation.temperature": 1.5,
            "grpo.steps_per_round": STEPS,
            "grpo.dynamic_sampling": False,
            "grpo.mask_truncated": False,  # 4-token completions are mostly cut: let them carry loss, so weights move
            "grpo.loss_type": "dapo",  # token-mean: the ranks' token counts differ, the global mean must not
            "grpo.mini_batch_size": 4,
            "grpo.micro_batch_size": 1,
            "grpo.lr": 1e-2,
            "gate.max_consecutive_rejections": 3,
            "retention.enabled": False,
            **over,
        },
    )
    return save_config(cfg)


def _candidate(db) -> str:
    return query(db, "SELECT output_checkpoint_id FROM training_runs ORDER BY step DESC LIMIT 1")[1][0][0]


def _kill_after_step(config, step: int) -> None:
    """Run the campaign in its own process group and SIGKILL the whole group once on-policy step ``step`` (0-based)
    has finished training (the next step is running)."""
    ctx = load_ctx(config, 1)
    code = (
        "from ratchet.flows.settings import configure_prefect; configure_prefect(); "
        "from ratchet.flows.daemon.run_server import run_api; from ratchet.flows.rounds.campaign import run_campaign\n"
        f"with run_api(): run_campaign({str(config)!r})"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    marker = ctx.at_step(step).stage_dir("train") / "_SUCCESS.json"
    deadline = time.time() + 600
    while time.time() < deadline and p.poll() is None and not marker.exists():
        time.sleep(0.1)
    assert p.poll() is None, "the round ended before it could be killed:\n" + (p.stdout.read() if p.stdout else "")
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert not (ctx.at_step(step + 1).stage_dir("train") / "_SUCCESS.json").exists()


@pytest.mark.slow
def test_two_rank_persistent_round_matches_one_rank_and_resumes_after_kill_9(prefect_harness, tmp_path, tiny_model_dir):
    """A 3-step GRPO round on compute.devices = ["cpu", "cpu"] runs persistent (2 ranks, each an engine and a DDP
    learner), writes one checkpoint, and its candidate's weights are the 1-rank round's to <= 1e-5 relative (the
    data-parallel standard: only float32 summation order differs). The same round killed with kill -9 during its
    last step and run again (both ranks replay the done steps' passes) gives the same candidate bit for bit."""
    from ratchet.flows.compute.resolve import checkpoint_path
    from ratchet.flows.rounds.campaign import run_campaign
    from ratchet.loop.train.data_parallel import max_rel_param_diff

    tasks = write_sum_tasks(tmp_path)
    pair = {"compute.devices": ["cpu", "cpu"]}
    one = _config(tmp_path / "one", tiny_model_dir, tasks)
    two = _config(tmp_path / "two", tiny_model_dir, tasks, **pair)
    run_campaign(one)
    (decision,) = run_campaign(two)
    c1, c2 = load_ctx(one, 1), load_ctx(two, 1)
    assert query(c2.db, "SELECT rollout_path FROM rounds")[1] == [("2 ranks (DDP)",)]  # the round says how it ran
    runs = query(c2.db, "SELECT step, metrics_json FROM training_runs ORDER BY step")[1]
    assert [r[0] for r in runs] == list(range(STEPS))
    assert all('"train/ranks": 2' in m for _, m in runs)  # every pass ran on both ranks
    saved = [p.name for p in c2.checkpoints_dir.iterdir()]
    assert saved == [_candidate(c2.db)]  # one folder of weights for 3 steps, on 2 ranks
    # The same rollouts (each rank sampled its batch from its own replica, seeded by the batch's index) ...
    rollouts = "SELECT prompt_id, sample_index, completion FROM trajectories WHERE purpose = 'rollout' ORDER BY ALL"
    assert query(c1.db, rollouts)[1] == query(c2.db, rollouts)[1]
    # ... and the same candidate, up to float32 summation order; the weights did move.
    base = checkpoint_path(c1, query(c1.db, "SELECT base_checkpoint_id FROM campaigns")[1][0][0])
    assert max_rel_param_diff(c1.checkpoints_dir / _candidate(c1.db), c2.checkpoints_dir / saved[0], base) <= 1e-5
    assert max_rel_param_diff(c2.checkpoints_dir / saved[0], base, base) > 1e-3
    assert decision["round"] == 1

    # kill -9 of the whole round (both ranks die with it) once step 2 has trained; the rerun replays steps 1-2 on
    # both ranks from the incumbent, runs step 3, and saves the uninterrupted round's candidate, byte for byte.
    three = _config(tmp_path / "three", tiny_model_dir, tasks, **pair)
    _kill_after_step(three, STEPS - 2)
    (again,) = run_campaign(three)
    assert _candidate(load_ctx(three, 1).db) == saved[0] and again["decision"] == decision["decision"]


@pytest.mark.slow
def test_lora_round_runs_persistent_with_merged_weights_in_the_engine(prefect_harness, tmp_path, tiny_model_dir):
    """grpo.lora_r > 0: one adapter trains over the round's steps, its
    merged weights go into the engine after each pass (its step-2 rollouts come from the updated policy), and the
    candidate (merged) is the only checkpoint written."""
    from ratchet.flows.rounds.campaign import run_campaign

    tasks = write_sum_tasks(tmp_path)
    cfg = _config(tmp_path / "lora", tiny_model_dir, tasks, **{"grpo.lora_r": 4, "grpo.lora_alpha": 8})
    ctx = load_ctx(cfg, 1)
    run_campaign(cfg)
    rows = query(ctx.db, "SELECT checkpoint_id, path FROM checkpoints WHERE training_run_id IS NOT NULL")[1]
    assert len(rows) == STEPS and [p for _, p in rows if p is not None] == [str(ctx.checkpoints_dir / _candidate(ctx.db))]
    sampled = query(
        ctx.db, "SELECT step, list(DISTINCT checkpoint_id) FROM trajectories WHERE purpose = 'rollout' GROUP BY 1 ORDER BY 1"
    )[1]
    inputs = query(ctx.db, "SELECT step, input_checkpoint_id FROM training_runs ORDER BY step")[1]
    assert [(k, [c]) for k, c in inputs] == [tuple(r) for r in sampled]  # each step sampled from the policy it trained
    # The engine held the learner's current (merged) policy at every step: the sampler's log-probs of the last
    # step's rollouts are the trainer's (a stale engine would sample from weights 2 updates behind).
    last = json.loads(query(ctx.db, "SELECT metrics_json FROM training_runs ORDER BY step DESC LIMIT 1")[1][0][0])
    assert last["train/sampler_gap_last"] < 1e-4, last["train/sampler_gap_last"]
