"""Config of held-out evaluation and the gate: ``[eval]`` and ``[gate]`` (see ``ratchet.loop.config``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ratchet.loop.config.base import _Frozen


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
