"""Group-relative advantage estimators for GRPO-family RL, and DAPO's zero-variance group filter.

Every estimator is a pure function ``(rewards, eps) -> advantages`` over one reward per completion,
laid out as ``(num_groups, G)``: row ``g`` holds the G completions sampled for prompt ``g``. The
trainer flattens the result with ``advantages.reshape(-1)`` (group-major, the order TRL and verl use)
to get one advantage per sequence, ``(num_groups * G,)``.

Estimators are registered by name in ``ADVANTAGE_ESTIMATORS`` (like verl's ``core_algos``); call
them through ``compute_advantages(name, rewards)`` so a config string picks one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

AdvantageFn = Callable[[torch.Tensor, float], torch.Tensor]


def _check_rewards(rewards: torch.Tensor) -> None:
    """Validate a ``(num_groups, G)`` floating-point reward tensor with G >= 2 and no NaN/inf.

    Raises:
        ValueError: wrong rank, non-float dtype, G < 2, or a non-finite reward.
    """
    if rewards.ndim != 2:
        raise ValueError(
            f"rewards has shape {tuple(rewards.shape)}; it must be 2-D (num_groups, group_size); "
            "reshape a flat reward vector with rewards.view(-1, group_size)"
        )
    if not rewards.is_floating_point():
        raise ValueError(f"rewards has dtype {rewards.dtype}; it must be floating point; pass rewards.float()")
    group_size = rewards.shape[1]
    if group_size < 2:
        raise ValueError(f"group_size ({group_size}) must be >= 2 for group advantages; set group_size >= 2")
    if not torch.isfinite(rewards).all():
        bad = int((~torch.isfinite(rewards)).sum())
        raise ValueError(
            f"rewards holds {bad} non-finite value(s); every completion needs a finite reward; "
            "give unscorable completions a reward (e.g. 0.0) or drop their group before this call"
        )


def grpo(rewards: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """GRPO outcome advantage: each reward standardised within its group.

    A_{g,i} = (r_{g,i} - mean_g(r)) / (std_g(r) + eps)   (Shao et al. 2024, DeepSeekMath, §4.1.2).

    ``std`` is the *unbiased* (Bessel-corrected, divide by G-1) sample std, as in TRL's GRPOTrainer
    (``nanstd`` with Bessel's correction, eps 1e-4) and ``torch.std``'s default. A zero-variance group
    gets advantage 0 for every member (numerator is 0), so it contributes no policy gradient.

    Args:
        rewards: (num_groups, G) float32, G >= 2.
        eps: added to the std so a zero-variance group does not divide by zero.

    Returns:
        (num_groups, G), same dtype as ``rewards``; each row has zero mean.

    Raises:
        ValueError: see ``_check_rewards``.
    """
    _check_rewards(rewards)
    mean = rewards.mean(dim=1, keepdim=True)  # (num_groups, 1)
    std = rewards.std(dim=1, keepdim=True, unbiased=True)  # (num_groups, 1)
    return (rewards - mean) / (std + eps)


def dr_grpo(rewards: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """Dr. GRPO advantage: the group mean is subtracted, the std is *not* divided out.

    A_{g,i} = r_{g,i} - mean_g(r)   (Liu et al. 2025, "Understanding R1-Zero-like Training", §3.1:
    dividing by std up-weights too-easy and too-hard questions, a question-level difficulty bias).
    Equals TRL's ``scale_rewards="none"``.

    Shapes: ``rewards`` (num_groups, G) float32 with G >= 2 -> (num_groups, G), same dtype; ``eps`` is unused
    (accepted so every estimator has one signature). Raises ``ValueError`` as ``_check_rewards``.
    """
    del eps
    _check_rewards(rewards)
    return rewards - rewards.mean(dim=1, keepdim=True)  # (num_groups, G)


def rloo(rewards: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """RLOO advantage: each reward minus the mean reward of the *other* G-1 completions of its prompt.

    A_{g,i} = r_{g,i} - 1/(G-1) * sum_{j != i} r_{g,j} = G/(G-1) * (r_{g,i} - mean_g(r))
    (Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization...", eq. 7;
    Kool et al. 2019). The leave-one-out baseline does not depend on the sample it scores, so the
    estimator is unbiased.

    Shapes: ``rewards`` (num_groups, G) float32 with G >= 2 -> (num_groups, G), same dtype; ``eps`` is unused
    (accepted so every estimator has one signature). Raises ``ValueError`` as ``_check_rewards``.
    """
    del eps
    _check_rewards(rewards)
    group_size = rewards.shape[1]
    others_mean = (rewards.sum(dim=1, keepdim=True) - rewards) / (group_size - 1)  # (num_groups, G)
    return rewards - others_mean


ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "rloo": rloo,
}


def compute_advantages(name: str, rewards: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """Advantages by the estimator registered under ``name`` in ``ADVANTAGE_ESTIMATORS``.

    Args:
        name: one of ``ADVANTAGE_ESTIMATORS`` ("grpo", "dr_grpo", "rloo").
        rewards: (num_groups, G) float32, G >= 2.
        eps: std floor for estimators that divide by the std (only "grpo").

    Returns:
        (num_groups, G), same dtype as ``rewards``.

    Raises:
        ValueError: unknown ``name`` (the message lists the valid names), or invalid ``rewards``.
    """
    try:
        fn = ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; valid names: {sorted(ADVANTAGE_ESTIMATORS)}") from None
    return fn(rewards, eps)


def zero_variance_mask(rewards: torch.Tensor) -> torch.Tensor:
    """Which groups have all G rewards equal (all right or all wrong): they carry no group-relative signal.

    Such groups get advantage 0 under every estimator here, so with the "seq-mean-token-mean" loss
    they still dilute the batch; DAPO drops them (``dynamic_sampling_filter``). Equality is exact:
    verifier rewards are discrete, and a group differing by any amount has a nonzero advantage.

    Args:
        rewards: (num_groups, G) float32, G >= 2.

    Returns:
        (num_groups,) bool; True where the group's rewards are all equal. ``.sum()`` is the count to log
        (e.g. ``train/zero_variance_groups``).
    """
    _check_rewards(rewards)
    return rewards.amax(dim=1) == rewards.amin(dim=1)  # (num_groups,)


def dynamic_sampling_filter(rewards: torch.Tensor) -> torch.Tensor:
    """Indices of the groups DAPO dynamic sampling keeps: those whose rewards are not all equal.

    DAPO (Yu et al. 2025, §3.2, eq. 11 constraint 0 < |{o_i : is_equivalent(a, o_i)}| < G) over-samples
    prompts and drops every group whose accuracy is 0 or 1, so each kept group has a nonzero gradient.
    Refilling the batch to its target size is the caller's job (sample more prompts, filter again).

    Args:
        rewards: (num_groups, G) float32, G >= 2.

    Returns:
        (num_kept,) int64 group indices in increasing order; index ``rewards[kept]`` (and the matching
        prompts and completions) with it. Empty when every group has zero variance.
    """
    return torch.nonzero(~zero_variance_mask(rewards), as_tuple=False).flatten()  # (num_kept,)
