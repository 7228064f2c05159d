"""One GPU shared by a vLLM engine and the learner it serves (a persistent GRPO round), sized from the model.

vLLM takes ``gpu_memory_utilization`` of the GPU's memory up front (weights plus KV cache). The co-located
``GRPOLearner`` keeps its policy, gradients, AdamW moments and reference on the same GPU for the whole round.
So the engine's share is what the learner leaves, less a headroom (CUDA contexts, allocator slack), and while
the learner trains the engine sleeps (vLLM sleep mode, level 1: weights offloaded to CPU memory, KV cache
dropped; ``VLLMBackend.sleep``/``wake_up``), which gives the learner's activations the engine's share as well:
the co-location of TRL's ``vllm_mode = "colocate"`` with ``vllm_enable_sleep_mode`` and of verl's hybrid engine.
Sleep mode is CUDA-only; this sizing has not run on a GPU yet (no GPU machine had vLLM).
"""

from __future__ import annotations

import math

HEADROOM = 0.05  # of the GPU's memory: CUDA contexts of the worker and the engine, allocator fragmentation
MIN_ENGINE_SHARE = 0.1  # below this the engine's KV cache holds too few sequences to be worth it


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``model.dtype`` ("float32": 4; "bfloat16", "float16": 2)."""
    return 2 if dtype in ("bfloat16", "float16") else 4


def learner_bytes(n_params: int, dtype: str, *, lora: bool) -> int:
    """GPU bytes a co-located learner holds for the round: full fine-tuning keeps the policy, its gradients and
    AdamW's two moments (all in ``dtype``, as ``torch.optim.AdamW`` keeps them) and the reference, 5 copies of
    the weights; LoRA keeps the frozen policy and the reference (adapters and their moments are ~1%), 2 copies.

    Args:
        n_params: the model's parameters (``ratchet.loop.checkpoints.parameter_count``).
        dtype: ``model.dtype`` ("float32", "bfloat16", "float16").
    """
    return (2 if lora else 5) * n_params * dtype_bytes(dtype)


def engine_memory_share(configured: float, learner: int, total: int, headroom: float = HEADROOM) -> float:
    """The ``gpu_memory_utilization`` a co-located vLLM engine gets: at most ``configured``, and no more than what
    ``learner`` bytes (``learner_bytes``) and ``headroom`` leave of ``total`` bytes; rounded down to 0.01.

    Raises:
        ValueError: that leaves the engine less than ``MIN_ENGINE_SHARE`` (names the sizes and the ways out).
    """
    share = math.floor(min(configured, 1.0 - learner / total - headroom) * 100) / 100
    if share < MIN_ENGINE_SHARE:
        raise ValueError(
            f"the learner co-located with the round's engine needs {learner / 2**30:.1f} GiB of the GPU's {total / 2**30:.1f} GiB, "
            f"leaving vLLM {max(share, 0):.2f} of it (< {MIN_ENGINE_SHARE}); use LoRA (grpo.lora_r), bfloat16, more GPUs "
            "with FSDP, or a smaller model"
        )
    return share
