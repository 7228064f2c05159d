"""Config of the trainers: ``[sft]`` (rejection-sampling fine-tuning) and ``[grpo]`` (the GRPO family), with their shared LoRA settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ratchet.loop.config.frozen import SEED_MAX, _Frozen, identity


class _LoRA(_Frozen):
    """LoRA settings shared by the trainers (SFT and GRPO use the same peft path, ``loop/train/grpo/learner.py``)."""

    lora_r: int = Field(
        0,
        ge=0,
        description="LoRA rank (Hu et al. 2021; needs `pip install 'ratchet[lora]'`); 0 trains every weight. Adapters "
        "are merged into each saved checkpoint. Typical: 8-64 with an lr ~10x the full fine-tune's (SFT ~1e-4).",
    )
    lora_alpha: int = Field(32, ge=1, description="LoRA scaling numerator (scale = lora_alpha / lora_r).")
    lora_target_modules: tuple[str, ...] = Field(
        ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
        description="Module names that get LoRA adapters (Llama-style attention and MLP projections).",
    )


class SFTConfig(_LoRA):
    init: Literal["incumbent", "base"] = Field(
        "incumbent",
        description="Fine-tune from the incumbent (expert iteration) or from the base model each round (ReST-EM, Singh et al. 2023).",
    )
    lr: float = Field(3e-5, gt=0.0, description="AdamW peak learning rate (linear warmup then linear decay).")
    epochs: int = Field(2, ge=1, description="Passes over the round's filtered trajectories.")
    batch_size: int = Field(8, ge=1, description="Examples per optimizer step.")
    warmup_ratio: float = Field(0.1, ge=0.0, lt=1.0, description="Share of steps with linear LR warmup.")
    weight_decay: float = Field(0.0, ge=0.0)
    max_grad_norm: float = Field(1.0, gt=0.0, description="Gradient clipping threshold (L2 norm).")
    packing: bool = Field(
        False,
        description="Train on packed micro-batches: one row, no padding, each shared prompt token computed once, "
        "attention kept within each example by a prefix-tree mask and positions reset per example "
        "(ratchet.loop.train.packing; TRL's padding_free generalised to shared prompts). The loss equals the padded "
        "path's (tests/loop/train/test_packing.py); not with flash attention, which takes no 4D mask. Off by default "
        "until it is measured against TRL's SFTTrainer in whole rounds (one demo-shaped batch: docs/devices.md).",
        json_schema_extra=identity("run"),
    )
    max_per_prompt: int = Field(
        2, ge=1, description="Cap on distinct correct completions kept per prompt (avoids over-weighting easy prompts)."
    )
    max_seq_len: int = Field(
        256,
        ge=16,
        description="Prompt + completion tokens (bounds GRPO too: completions keep <= half). Longer examples would be cut "
        "(prompt from the left), so preflight refuses a limit below the longest prompt + max_new_tokens; "
        "training counts any cut in train/truncated_prompts and train/truncated_completions.",
    )
    seed: int = Field(0, ge=0, le=SEED_MAX, description="Base training seed (0..2^32-1); each round derives its own.")
    rationalization: bool = Field(
        False,
        description="rft: rationalization (STaR, Zelikman et al. 2022 s3.3): prompts none of whose G rollouts was right "
        "get G more with the gold answer given as a hint; the verified-correct ones are trained on under the prompt "
        "without the hint (training_examples.origin = 'rationalization'). Their tokens count in the round's generation.",
        json_schema_extra=identity("neutral_default"),
    )
    general_data: str | None = Field(
        None,
        description="JSONL of general SFT records mixed into each rft/sft round's training set (DeepSeek-R1 phase 3: "
        "rejection-sampled reasoning data plus general data keeps non-reasoning skills): chat records "
        '{"messages": [..., {"role": "assistant", "content": ...}]} or {"prompt": ..., "completion": ...}. '
        "Checked at preflight. Unset: none.",
        json_schema_extra=identity("neutral_default"),
    )
    general_ratio: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Share of the training set drawn from general_data (k = n x ratio / (1 - ratio) records beside n "
        "task examples, sampled without replacement, seeded by sft.seed and the round). R1 mixed ~25% general data.",
        json_schema_extra=identity("neutral_default"),
    )

    @model_validator(mode="after")
    def _check_general(self) -> SFTConfig:
        if (self.general_ratio > 0) != (self.general_data is not None):
            raise ValueError(
                f"sft.general_ratio ({self.general_ratio}) and sft.general_data ({self.general_data!r}) go together; "
                "set both (e.g. general_data = 'general.jsonl', general_ratio = 0.25) or neither"
            )
        return self


class GRPOConfig(_LoRA):
    advantage: Literal["grpo", "dr_grpo", "rloo"] = Field(
        "grpo",
        description="Group advantage: grpo (r-mean)/std (Shao et al. 2024), dr_grpo r-mean (Liu et al. 2025), "
        "rloo leave-one-out (Ahmadian et al. 2024).",
    )
    loss_type: Literal["grpo", "dr_grpo", "dapo"] = Field(
        "grpo",
        description="Loss aggregation as TRL's loss_type: grpo seq-mean-token-mean, dapo token-mean, "
        "dr_grpo seq-mean-token-sum-norm.",
    )
    importance_sampling_level: Literal["token", "sequence"] = Field(
        "token", description="'sequence' = GSPO (Zheng et al. 2025); use epsilon_low/high ~3e-4/4e-4 with it."
    )
    epsilon_low: float = Field(0.2, ge=0.0, lt=1.0, description="Lower clip range of the importance ratio.")
    epsilon_high: float = Field(0.2, ge=0.0, description="Upper clip range; DAPO clip-higher recommends 0.28.")
    beta: float = Field(
        0.0,
        ge=0.0,
        description="KL coefficient to the reference (GRPO paper 0.04; DAPO, Dr. GRPO 0; common grid 0.001-0.03). "
        "0 measured here (docs/recipes.md 'Defaults, measured'): 0.001 and 0.01 gave the same held-out verdicts, 0.03 a "
        "worse round 2; at 0 the reference's forward runs only on a round's last step, for the KL guard "
        "(grpo.max_kl), which still measures and guards the KL.",
    )
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k3", description="KL estimator (Schulman 2020).")
    reference: Literal["base", "incumbent"] = Field(
        "incumbent",
        description="Frozen reference for the KL anchor and guard: the round's incumbent (the anchor moves with "
        "each promotion, like TRL's sync_ref_model; guards bound each round's drift) or the base model (bounds total drift).",
    )
    dynamic_sampling: bool = Field(True, description="Drop groups whose rewards are all equal (DAPO dynamic sampling).")
    max_oversample: float = Field(
        0.0,
        ge=0.0,
        le=8.0,
        description="Refill (DAPO dynamic sampling, Yu et al. 2025 s3.2): after verification a step replaces the groups "
        "dynamic_sampling drops with fresh prompts (the next candidates of tasks.selection), until its batch of groups "
        "with mixed rewards is full or it has drawn this multiple of the round's prompts extra (split over the steps). "
        "0: no refill (a step trains on the groups it has). Every refill's tokens count in the round's generation.",
        json_schema_extra=identity("neutral_default"),
    )
    mask_truncated: bool = Field(True, description="No loss on completions cut at max_new_tokens (DAPO overlong filtering).")
    lr: float = Field(
        6e-6,
        gt=0.0,
        description="AdamW learning rate. SmolLM2-135M: 1e-5 moved KL(policy || incumbent) to 0.5 nats/token "
        "in 4 optimizer steps; 6e-6 keeps a round near 0.2.",
    )
    ppo_epochs: int = Field(1, ge=1, description="Passes over each step's groups; old log-probs are fixed per pass.")
    mini_batch_size: int = Field(32, ge=1, description="Sequences per optimizer step.")
    micro_batch_size: int = Field(8, ge=1, description="Sequences per forward/backward (gradient accumulation inside a step).")
    max_grad_norm: float = Field(1.0, gt=0.0)
    steps_per_round: int = Field(
        2,
        ge=1,
        description="On-policy iterations per round: the round's prompts are split into this many chunks and each "
        "runs generate -> verify -> update from the previous step's policy (stored with its step index).",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute activations in backward: less memory for large models, ~30% slower; turns off the "
        "shared-prompt forward (it needs the KV cache).",
    )
    shared_prompt: bool = Field(
        True,
        description="Compute each group's prompt once and its G completions on that KV cache (same values and "
        "gradients as the plain forward, ~2x fewer tokens for the demo).",
    )
    max_kl: float = Field(
        0.5,
        gt=0.0,
        description="Gate halts when KL(policy || reference) at the round's last optimizer step exceeds this "
        "(nats/token; importance-weighted k-estimator, DeepSeek-V3.2).",
    )
    min_entropy: float = Field(
        0.01,
        ge=0.0,
        description="Gate halts when the token entropy at the round's last optimizer step falls below this (collapse).",
    )
    sampler_correction: Literal["auto", "tis", "mis", "none"] = Field(
        "auto",
        description="Correct the gap between the rollout engine's and the trainer's probabilities (Yao et al. 2025): "
        "tis = truncated importance sampling, each token's loss times min(pi_trainer / pi_sampler, C); mis = masked "
        "IS, each sequence's loss times its ratio rho, dropped when rho leaves [1/C, C]; auto = tis when the engine is "
        "not the learner's own module (vLLM, Ray, another process), none when it is (the gap then measures ~0).",
        json_schema_extra=identity("neutral_default"),
    )
    sampler_is_cap: float = Field(
        2.0,
        gt=1.0,
        description="C of grpo.sampler_correction: the largest importance weight TIS keeps, and MIS's band [1/C, C]. "
        "Yao et al. 2025 use C = 2 (verl's default); TRL defaults to 3. Larger C: less bias, more variance.",
        json_schema_extra=identity("neutral_default"),
    )
    max_sampler_gap: float = Field(
        0.25,
        gt=0.0,
        description="Gate halts when the mean |log pi_sampler - log pi_trainer| per token at the round's last "
        "optimizer step exceeds this (nats): the engine samples from another policy than the one trained (stale or "
        "wrong weights). The transformers engine generating from the learner's own module measured ~1e-6.",
        json_schema_extra=identity("neutral_default"),
    )

    @model_validator(mode="after")
    def _check(self) -> GRPOConfig:
        if self.max_oversample > 0 and not self.dynamic_sampling:
            raise ValueError(
                f"grpo.max_oversample ({self.max_oversample}) refills the groups dynamic sampling drops, and "
                "grpo.dynamic_sampling = false drops none; set dynamic_sampling = true or max_oversample = 0"
            )
        if self.micro_batch_size > self.mini_batch_size:
            raise ValueError(
                f"grpo.micro_batch_size ({self.micro_batch_size}) must be <= grpo.mini_batch_size "
                f"({self.mini_batch_size}); lower micro_batch_size"
            )
        return self
