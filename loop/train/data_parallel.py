"""Data-parallel sharding for the trainers: which rows a rank trains on, and how its loss is normalized.

Under ``accelerate launch --num_processes R`` every rank holds the whole batch (the trainers read the same
stage files) and trains on a disjoint, contiguous slice of each mini-batch (``rank_slice``). DDP
all-reduces the gradients by *averaging* over ranks, so a rank's loss must be its partial sum divided by
the GLOBAL denominator and multiplied by R (OpenRLHF-style):

    grad = 1/R sum_r grad(R * S_r / D) = grad(sum_r S_r / D) = grad(S / D)

with S_r the rank's partial sum (of token losses for token-mean, of per-sequence losses for the
sequence-level aggregations) and D the global denominator (active tokens, or sequences, of the whole
mini-batch). That is exactly the single-process loss S / D. Dividing by a rank's own count instead
(mean of per-rank means) weighs a token by 1/(R * D_r): wrong whenever ranks hold different counts,
which token-level losses almost always do. ``global_count`` all-reduces D before the backward.

Every rank must run the same number of forward/backward passes per optimizer step (DDP's collectives
are matched call by call): ``micro_batches`` pads a short rank's list with empty micro-batches, which the
trainer runs as a zero-weight pass over a real row (every parameter gets a zero gradient, so the
all-reduce still happens).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def rank_slice(items: Sequence[T], rank: int, world: int) -> list[T]:
    """The contiguous share of ``items`` that rank ``rank`` of ``world`` trains on; shares are disjoint, cover
    ``items`` and differ in length by at most one (an item a rank trains on is never another rank's).

    Raises:
        ValueError: ``world < 1`` or ``rank`` outside ``[0, world)``.
    """
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank {rank} of world {world}: need world >= 1 and 0 <= rank < world")
    n = len(items)
    return list(items[rank * n // world : (rank + 1) * n // world])


def micro_batches(items: Sequence[T], rank: int, world: int, micro: int) -> list[list[T]]:
    """This rank's share of a mini-batch cut into micro-batches of ``micro``, padded with empty lists to the
    count every rank runs, ``ceil(ceil(len(items) / world) / micro)`` (at least 1)."""
    mine = rank_slice(items, rank, world)
    count = max(1, math.ceil(math.ceil(len(items) / world) / micro))
    out = [mine[a : a + micro] for a in range(0, len(mine), micro)]
    return out + [[] for _ in range(count - len(out))]


def global_count(accelerator, local: float) -> float:
    """``local`` summed over every rank (an all-reduce; the value itself with one process)."""
    import torch

    if accelerator.num_processes == 1:
        return float(local)
    t = torch.tensor([float(local)], dtype=torch.float64, device=accelerator.device)
    return float(accelerator.reduce(t, reduction="sum").item())


# FSDP as Ratchet runs it (``compute.fsdp``): full sharding, one unit per decoder layer (the model's
# ``_no_split_modules``), a full state dict gathered for the save, original parameters kept (AdamW sees HF names).
# ``accelerate launch --fsdp_<key> <value>`` takes them as flags (``fsdp_launch_flags``), a rank started by
# Ratchet itself as accelerate's environment (``fsdp_env``): one table, so the two paths cannot drift apart.
FSDP_SETTINGS = {
    "sharding_strategy": "FULL_SHARD",
    "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
    "state_dict_type": "FULL_STATE_DICT",
    "use_orig_params": "true",
}


def fsdp_env() -> dict[str, str]:
    """``FSDP_SETTINGS`` as the environment ``accelerate launch --use_fsdp`` gives a rank, which ``Accelerator()``
    reads (``ACCELERATE_USE_FSDP``, ``FSDP_SHARDING_STRATEGY``, ...). accelerate builds FSDP on GPUs only: on CPU
    (``Accelerator(cpu=True)``) the same environment gives plain DDP (measured with accelerate 1.15)."""
    return {"ACCELERATE_USE_FSDP": "true", **{f"FSDP_{k.upper()}": v for k, v in FSDP_SETTINGS.items()}}


def full_state_dict(module, prefix: str = "") -> dict:
    """The full (unsharded) weights of a possibly FSDP-wrapped ``module`` on EVERY rank, for a rank's own rollout
    engine (the gather verl's hybrid engine does before each rollout): Hugging Face names -> tensors of the unsharded
    shapes and the parameters' dtype, on the parameters' device.

    Uses ``torch.distributed.checkpoint.state_dict.get_model_state_dict(full_state_dict=True)``, which all-gathers
    FSDP1 flat parameters and FSDP2 DTensor shards alike (and returns a plain module's own tensors); with FSDP it is
    a collective, so every rank of the group must call it at the same point. ``prefix`` (e.g. ``"policy."``) is
    stripped from the names; names without it are left out (a wrapper's other submodules).
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=False))
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def make_accelerator():
    """An ``Accelerator`` for the trainers: CPU when there is no GPU. Under ``accelerate launch`` it is DDP (gloo on
    CPU, NCCL on GPU), or FSDP with ``--use_fsdp`` (``compute.fsdp``)."""
    import torch
    from accelerate import Accelerator

    return Accelerator(cpu=not torch.cuda.is_available())


def max_rel_param_diff(a_dir, b_dir, ref_dir) -> float:
    """max over tensors W of ||W_a - W_b||_2 / ||W_ref||_2 (Frobenius norms, float64) between two saved checkpoints.

    With ``ref_dir`` the common starting point, W_a - W_b = dW_a - dW_b: how far two training runs' updates
    differ, relative to the size of the weights they update (a tensor with ||W_ref|| = 0 uses 1).

    Raises:
        ValueError: the checkpoints hold different tensor names or shapes.
    """
    from pathlib import Path

    from safetensors.torch import load_file

    def load(d) -> dict:
        return {k: v for f in sorted(Path(d).glob("*.safetensors")) for k, v in load_file(f).items()}

    a, b, ref = load(a_dir), load(b_dir), load(ref_dir)
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        raise ValueError(f"checkpoints {a_dir} and {b_dir} hold different tensors; compare runs of the same model")
    worst = 0.0
    for k in a:
        base = float(ref[k].double().norm()) if k in ref else 0.0
        worst = max(worst, float((a[k].double() - b[k].double()).norm()) / (base or 1.0))
    return worst
