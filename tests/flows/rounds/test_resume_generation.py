"""Resumable generation (issue 42): a generate stage killed with kill -9 half-way resumes from its committed batches.

The stage runs in a child process on the tiny model (64 commit batches of 2 rollouts); once half the batch shards
exist the whole process group is killed. The same stage run again samples only the missing batches, and its rollouts
equal those of an uninterrupted run of the same round in another store: same trajectory ids, texts and token ids, no
duplicate in the store.
"""

import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from ratchet.flows.rounds.stages.rollout_batches import BATCHES_DIR
from ratchet.loop.campaign.round_context import load_ctx, read_marker, save_config
from ratchet.loop.config import load_config
from ratchet.store.db import query
from tests.flows.rounds.test_round import write_sum_tasks

BATCHES = 64  # 32 prompts x G=4 rollouts, 2 per batch


def _config(root, tiny_model_dir, tasks):
    root.mkdir(parents=True, exist_ok=True)
    cfg = load_config(
        None,
        **{
            "db": str(root / "r.duckdb"),
            "campaign": "resume",
            "max_rounds": 1,
            "model.name_or_path": str(tiny_model_dir),
            "tasks.source": "jsonl",
            "tasks.path": str(tasks),
            "tasks.heldout_fraction": 0.3,
            "tasks.fewshot": 0,
            "tasks.system_prompt": "sys",
            "tasks.train_prompts_per_round": 32,
            "tasks.heldout_prompts": 4,
            "generation.group_size": 4,
            "generation.batch_size": 2,
            "generation.max_new_tokens": 8,
            "generation.temperature": 1.0,
        },
    )
    return save_config(cfg)


GENERATE = """
import sys
from ratchet.flows.rounds.campaign import prepare_campaign, start_round
from ratchet.flows.rounds.stages.pipeline import generate
from ratchet.flows.rounds.stages.round_engine import round_engine
from ratchet.loop.campaign.round_context import load_ctx
path = sys.argv[1]
prepare_campaign.fn(path)
incumbent = start_round.fn(path, 1)
with round_engine(load_ctx(path, 1), incumbent) as engine:
    generate.fn(path, 1, 0, None, engine)
"""


def _generate(config) -> None:
    subprocess.run([sys.executable, "-c", GENERATE, str(config)], check=True, capture_output=True, text=True)


def _rows(config) -> list[tuple]:
    part = load_ctx(config, 1).stage_dir("generate") / "part-0.parquet"
    rows = pq.read_table(part).to_pylist()
    return sorted((r["trajectory_id"], r["prompt_id"], r["sample_index"], r["completion"], tuple(r["completion_token_ids"])) for r in rows)  # fmt: skip


@pytest.mark.slow
def test_generation_killed_at_half_resumes_only_the_missing_batches(tmp_path, tiny_model_dir):
    tasks = write_sum_tasks(tmp_path)
    killed, whole = _config(tmp_path / "killed", tiny_model_dir, tasks), _config(tmp_path / "whole", tiny_model_dir, tasks)
    stage = load_ctx(killed, 1).stage_dir("generate")
    p = subprocess.Popen(
        [sys.executable, "-c", GENERATE, str(killed)], start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deadline, shards = time.time() + 600, []
    while time.time() < deadline and p.poll() is None:
        shards = list(stage.glob(f"{BATCHES_DIR}/*/batch-*.parquet"))
        if len(shards) >= BATCHES // 2:
            break
        time.sleep(0.02)
    assert p.poll() is None, "generation ended before it could be killed:\n" + p.stdout.read().decode()
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    committed = len(list(stage.glob(f"{BATCHES_DIR}/*/batch-*.parquet")))
    assert BATCHES // 2 <= committed < BATCHES and read_marker(stage) is None

    _generate(killed)  # the same stage again: reads the committed batches, samples the rest
    marker = read_marker(stage)
    assert marker["batches"] == BATCHES and marker["batches_resumed"] == committed
    assert not (stage / BATCHES_DIR).exists()  # dropped once part-0.parquet and the marker hold every row

    _generate(whole)  # the same round, never interrupted
    assert read_marker(load_ctx(whole, 1).stage_dir("generate"))["batches_resumed"] == 0
    assert _rows(killed) == _rows(whole)
    db = load_ctx(killed).db
    n, distinct = query(db, "SELECT count(*), count(DISTINCT trajectory_id) FROM trajectories WHERE purpose = 'rollout'")[1][0]
    assert n == distinct == BATCHES * 2
