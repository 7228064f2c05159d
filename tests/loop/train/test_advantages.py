"""Group advantage estimators and DAPO's zero-variance filter: hand-computed values and properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet.loop.train.advantages import (
    ADVANTAGE_ESTIMATORS,
    compute_advantages,
    dr_grpo,
    dynamic_sampling_filter,
    grpo,
    rloo,
    zero_variance_mask,
)

REWARDS = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]])  # (num_groups=3, G=4)


# ----------------------------------------------------------------------------- hand-computed values


def test_grpo_hand_computed_uses_unbiased_std_like_trl():
    # row 0: mean 0.25, unbiased std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    # row 1: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735; row 2: zero variance -> 0
    eps = 1e-4
    s1 = math.sqrt(1 / 3)
    expected = torch.tensor(
        [
            [0.75 / (0.5 + eps), -0.25 / (0.5 + eps), -0.25 / (0.5 + eps), -0.25 / (0.5 + eps)],
            [0.5 / (s1 + eps), -0.5 / (s1 + eps), -0.5 / (s1 + eps), 0.5 / (s1 + eps)],
            [0.0, 0.0, 0.0, 0.0],
        ]
    )
    torch.testing.assert_close(grpo(REWARDS, eps), expected)


def test_dr_grpo_hand_computed_is_mean_centred_only():
    expected = torch.tensor([[0.75, -0.25, -0.25, -0.25], [0.5, -0.5, -0.5, 0.5], [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(dr_grpo(REWARDS), expected)


def test_rloo_hand_computed_leave_one_out_baseline():
    # row 0: 1 - mean(0,0,0) = 1; 0 - mean(1,0,0) = -1/3
    # row 1: 1 - mean(0,0,1) = 2/3; 0 - mean(1,0,1) = -2/3
    expected = torch.tensor([[1.0, -1 / 3, -1 / 3, -1 / 3], [2 / 3, -2 / 3, -2 / 3, 2 / 3], [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(rloo(REWARDS), expected)


def test_registry_dispatches_by_name():
    assert set(ADVANTAGE_ESTIMATORS) == {"grpo", "dr_grpo", "rloo"}
    for name, fn in ADVANTAGE_ESTIMATORS.items():
        torch.testing.assert_close(compute_advantages(name, REWARDS), fn(REWARDS, 1e-4))


# ----------------------------------------------------------------------------- errors


def test_unknown_estimator_lists_valid_names():
    with pytest.raises(ValueError, match=r"unknown advantage estimator 'ppo'.*\['dr_grpo', 'grpo', 'rloo'\]"):
        compute_advantages("ppo", REWARDS)


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_group_size_one_is_rejected_with_the_fix(name):
    with pytest.raises(ValueError, match=r"group_size \(1\) must be >= 2 for group advantages; set group_size >= 2"):
        compute_advantages(name, torch.ones(3, 1))


def test_flat_rewards_are_rejected_with_reshape_hint():
    with pytest.raises(ValueError, match=r"must be 2-D.*view\(-1, group_size\)"):
        grpo(torch.ones(8))


def test_non_finite_rewards_are_rejected():
    with pytest.raises(ValueError, match="1 non-finite"):
        grpo(torch.tensor([[1.0, float("nan")]]))


# ----------------------------------------------------------------------------- zero-variance groups / DAPO


def test_zero_variance_mask_and_dynamic_sampling_filter():
    rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0], [0.5, 0.0]])
    assert zero_variance_mask(rewards).tolist() == [True, False, True, False]
    kept = dynamic_sampling_filter(rewards)
    assert kept.dtype == torch.int64 and kept.tolist() == [1, 3]


def test_dynamic_sampling_filter_can_drop_everything():
    assert dynamic_sampling_filter(torch.zeros(3, 4)).numel() == 0


# ----------------------------------------------------------------------------- properties

rewards_st = st.integers(1, 5).flatmap(
    lambda n: st.integers(2, 6).flatmap(
        lambda g: st.lists(
            st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, -1.0, 3.0]), min_size=g, max_size=g), min_size=n, max_size=n
        )
    )
)


def _loop_reference(name: str, rows: list[list[float]], eps: float = 1e-4) -> torch.Tensor:
    """Plain-Python, one reward at a time: the definitions as written in the papers."""
    out = []
    for row in rows:
        g = len(row)
        mean = sum(row) / g
        std = math.sqrt(sum((r - mean) ** 2 for r in row) / (g - 1))
        if name == "grpo":
            out.append([(r - mean) / (std + eps) for r in row])
        elif name == "dr_grpo":
            out.append([r - mean for r in row])
        else:
            out.append([r - (sum(row) - r) / (g - 1) for r in row])
    return torch.tensor(out)


@settings(max_examples=40, deadline=None)
@given(rows=rewards_st, name=st.sampled_from(sorted(ADVANTAGE_ESTIMATORS)))
def test_vectorised_equals_loop(rows, name):
    rewards = torch.tensor(rows, dtype=torch.float32)
    assert torch.allclose(compute_advantages(name, rewards), _loop_reference(name, rows).float(), atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(rows=rewards_st)
def test_group_advantages_have_zero_mean_per_group(rows):
    rewards = torch.tensor(rows, dtype=torch.float32)
    for name in ADVANTAGE_ESTIMATORS:
        assert torch.allclose(compute_advantages(name, rewards).mean(dim=1), torch.zeros(len(rows)), atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(rows=rewards_st)
def test_zero_variance_groups_get_zero_advantage_and_rloo_is_scaled_dr_grpo(rows):
    rewards = torch.tensor(rows, dtype=torch.float32)
    g = rewards.shape[1]
    zv = zero_variance_mask(rewards)
    for name in ADVANTAGE_ESTIMATORS:
        assert (compute_advantages(name, rewards)[zv] == 0).all()
    torch.testing.assert_close(rloo(rewards), dr_grpo(rewards) * g / (g - 1))
    assert dynamic_sampling_filter(rewards).numel() == int((~zv).sum())
