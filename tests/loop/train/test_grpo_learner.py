"""GRPOLearner: on-policy passes with the policy kept in memory equal passes that save and reload a checkpoint."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ratchet.loop.config import GRPOConfig
from ratchet.loop.generation.transformers_backend import TransformersBackend
from ratchet.loop.train.data_parallel import max_rel_param_diff
from ratchet.loop.train.grpo import GRPOLearner, GRPORun, train_grpo

sys.path.insert(0, str(Path(__file__).parent))
from dp_train import samples  # noqa: E402


def test_two_passes_in_memory_equal_two_saved_steps(tiny_model_dir, tmp_path):
    s = GRPOConfig(lr=3e-4, mini_batch_size=5, micro_batch_size=2)
    run = GRPORun(temperature=1.0, max_completion_length=32, seed=3)
    batch = samples()
    first, second = batch[:6], batch[6:]  # groups 0-2, then 3-4
    opt = tmp_path / "optimizer.pt"
    r1 = train_grpo(tiny_model_dir, first, tmp_path / "s1", s, run, ref_dir=tiny_model_dir, optimizer_state=opt)
    r2 = train_grpo(tmp_path / "s1", second, tmp_path / "s2", s, run, ref_dir=tiny_model_dir, optimizer_state=opt)
    learner = GRPOLearner(tiny_model_dir, s, ref_dir=tiny_model_dir)
    m1, m2 = learner.train_pass(first, run), learner.train_pass(second, run)
    assert m1.checkpoint_dir is None and m2.steps == r2.steps
    assert m2.metrics["train/kl/mean"] == pytest.approx(r2.metrics["train/kl/mean"], rel=1e-4, abs=1e-9)
    assert m1.metrics["train/loss/policy"] == pytest.approx(r1.metrics["train/loss/policy"], rel=1e-5, abs=1e-9)
    # the engine can take the learner's weights in place, without a checkpoint per step
    engine = TransformersBackend(tiny_model_dir, batch_size=4)
    engine.update_weights(learner.state_dict())
    learner.save(tmp_path / "l2")
    assert max_rel_param_diff(tmp_path / "s2", tmp_path / "l2", tiny_model_dir) <= 1e-6
    assert max_rel_param_diff(tmp_path / "l2", tiny_model_dir, tiny_model_dir) > 1e-3
    saved = TransformersBackend(tmp_path / "l2", batch_size=4).model.state_dict()
    assert all((engine.model.state_dict()[k] == v).all() for k, v in saved.items())
