"""Data-parallel training shards and stays exact: 2 gloo ranks == 1 process on the whole batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet.loop.train.data_parallel import max_rel_param_diff, micro_batches, rank_slice

SCRIPT = Path(__file__).with_name("dp_train.py")


def test_rank_slices_are_disjoint_and_cover():
    for n in range(0, 12):
        for world in (1, 2, 3, 5):
            shares = [rank_slice(list(range(n)), r, world) for r in range(world)]
            assert sorted(x for s in shares for x in s) == list(range(n))
            assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_micro_batches_same_count_on_every_rank():
    mini = list(range(5))
    counts = {len(micro_batches(mini, r, 2, 2)) for r in range(2)}
    assert counts == {2}
    assert micro_batches(mini, 0, 2, 2) == [[0, 1], []]  # rank 0 holds 2 rows: one real pass and one zero-weight pass
    with pytest.raises(ValueError, match="rank 2 of world 2"):
        rank_slice(mini, 2, 2)


def _load(out: Path, name: str, rank: int) -> dict:
    return json.loads((out / name / f"rank-{rank}.json").read_text())


def test_two_ranks_equal_one_process(tiny_model_dir, tmp_path):
    """GRPO (seq-mean-token-mean, token-mean, Dr. GRPO) and SFT: same updated weights (1e-5 relative per tensor)
    and same pre-clip gradient norms (a loss scaled by a constant would pass the weights under Adam, not these),
    with each rank training on a disjoint part of the batch."""
    sys.path.insert(0, str(SCRIPT.parent))
    import dp_train

    single, multi = tmp_path / "single", tmp_path / "multi"
    dp_train.main(str(tiny_model_dir), str(single), [*dp_train.LOSSES, "sft"])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1"]
    launch += ["--mixed_precision", "no", "--dynamo_backend", "no", str(SCRIPT), str(tiny_model_dir), str(multi)]
    proc = subprocess.run(launch, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in [*dp_train.LOSSES, "sft"]:
        one = _load(single, name, 0)
        r0, r1 = _load(multi, name, 0), _load(multi, name, 1)
        assert r0["rows"] and r1["rows"] and not set(r0["rows"]) & set(r1["rows"]), name
        assert sorted(r0["rows"] + r1["rows"]) == one["rows"], name
        # fp32 sums over other micro-batch partitions: measured 1.45e-5 relative on a later step's norm here (the same on
        # the commit before this session); a loss scaled by a constant (what this guards against) is off by >= 2x.
        assert r0["grad_norms"] == pytest.approx(one["grad_norms"], rel=1e-4), name
        assert max_rel_param_diff(single / name, multi / name, tiny_model_dir) <= 1e-5, name
        assert max_rel_param_diff(single / name, tiny_model_dir, tiny_model_dir) > 1e-3, name  # it did train
