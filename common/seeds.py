"""Every random seed a round uses, derived in one place from the configured base seeds.

The formulas are fixed: changing one changes every run's samples (and the README's demo figures).
Each purpose mixes the round index and on-policy step with its own odd constants, so no two purposes
of the same round, and no two rounds, share a seed.
"""

from __future__ import annotations

from typing import Literal

Purpose = Literal["rollouts", "train_prompts", "grpo", "sft", "general_data", "refill", "rationalization"]


def derive_seed(purpose: Purpose, base: int, round_index: int, step: int = 0, draw: int = 0) -> int:
    """The seed of ``purpose`` in round ``round_index``, on-policy step ``step`` (``draw``: the refill pass, >= 1).

    Raises:
        ValueError: an unknown purpose (the message lists the valid ones).
    """
    if purpose == "rollouts":
        return base * 1_000_003 + round_index + 7919 * step
    if purpose == "train_prompts":
        return base * 1_000_003 + round_index
    if purpose == "grpo":
        return base + 1009 * round_index + step
    if purpose == "sft":
        return base + round_index
    if purpose == "general_data":  # which sft.general_data records a round mixes in
        return base * 1_000_033 + 104_729 * round_index
    if purpose == "refill":  # rollouts of the prompts that replace a step's dropped groups (grpo.max_oversample)
        return base * 1_000_039 + round_index + 7919 * step + 15_485_863 * draw
    if purpose == "rationalization":  # hinted rollouts of a round's unsolved prompts (sft.rationalization)
        return base * 1_000_081 + 130_363 * round_index
    raise ValueError(
        f"unknown seed purpose {purpose!r}; valid: rollouts, train_prompts, grpo, sft, general_data, refill, rationalization"
    )


def batch_seed(call_seed: int, index: int) -> int:
    """The seed of one generation batch (transformers) or request (vLLM on GPU): ``call_seed * 100_003 + index``.

    ``index`` is the batch index in the call's (prompt, sample) job list, or the global prompt index, so a
    shard of a call's jobs samples exactly what the whole call would.
    """
    return call_seed * 100_003 + index
