"""Config of held-out evaluation and the gate: ``[eval]`` and ``[gate]`` (see ``ratchet.loop.config``)."""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import Field, model_validator

from ratchet.loop.config.frozen import _Frozen

_log = logging.getLogger(__name__)


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


class MonitorsConfig(_Frozen):
    """``[gate.monitors]``: reward-hacking monitors computed every round from the stored greedy evaluation completions
    of the candidate, each against the incumbent's on the same prompts (or the golds' own rate); a monitor above its
    threshold halts the campaign with its name in the reason (``ratchet.loop.gate.monitors``; docs/gate.md). A
    threshold of None only measures and stores (``round_monitors``)."""

    min_prompts: int = Field(
        100,
        ge=1,
        description="A monitor trips only when at least this many prompts were compared: below that a point estimate's "
        "noise (a share moves 0.1 with one prompt in ten) would halt good rounds. Always measured and stored.",
    )
    length_mean_ratio: float | None = Field(
        2.0,
        gt=0.0,
        description="Halt when the candidate's mean completion length (tokens) exceeds this multiple of the incumbent's: "
        "RL's length bias (Singhal et al. 2023, 'A Long Way to Go'; Dr. GRPO, Liu et al. 2025, section 3.1).",
    )
    length_p90_ratio: float | None = Field(
        2.0, gt=0.0, description="The same on the 90th percentile of completion lengths (the tail that grows toward the cap)."
    )
    truncation_rate: float | None = Field(
        0.10,
        ge=0.0,
        le=1.0,
        description="Halt when the share of completions cut at max_new_tokens (finish_reason 'length') rises by more "
        "than this over the incumbent's (absolute): completions growing into the cap.",
    )
    format_without_correct: float | None = Field(
        0.10,
        ge=0.0,
        le=1.0,
        description="Halt when the share of wrong completions that still earn the format reward rises by more than "
        "this over the incumbent's (among wrong ones, so a merely less accurate candidate does not trip it): the policy "
        "learning the format term, not the task (reward hacking, Skalse et al. 2022).",
    )
    no_answer_rate: float | None = Field(
        0.10,
        ge=0.0,
        le=1.0,
        description="Halt when the share of completions without a parseable answer rises by more than this over the "
        "incumbent's (absolute; gate.max_no_answer_rate is the absolute ceiling).",
    )
    same_answer_share: float | None = Field(
        0.10,
        ge=0.0,
        le=1.0,
        description="Halt when the share of distinct prompts given the candidate's most common final answer exceeds "
        "the golds' own most-common-answer share on the same prompts (arithmetic golds repeat), or the incumbent's "
        "when higher, by more than this: one answer given to many different prompts.",
    )
    language_mixing: float | None = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="Halt when the share of completions with under 90% of their letters in the target script rises "
        "by more than this over the incumbent's (language consistency of the DeepSeek-R1 recipe, DeepSeek-AI 2025, "
        "section 2.3.2; target: verifier.target_language, else the questions' script).",
    )
    cross_check_disagreement: float | None = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="With verifier.cross_check set: halt when the share of completions on which the second verifier "
        "disagrees with the first rises by more than this over the incumbent's (a verifier being gamed).",
    )


class GateConfig(_Frozen):
    """The gate's rule and limits (``ratchet.loop.gate``; docs/gate.md). Not part of a campaign's identity: change it
    any time, each gate decision records the rule and settings it ran with (``gate_decisions.settings_json``)."""

    rule: Literal["noninferiority", "no_detected_drop"] = Field(
        "noninferiority",
        description="noninferiority: promote only when the one-sided (1 - alpha) lower confidence bound of the paired "
        "pass@1 change is >= -margin vs the incumbent and vs the best ever promoted, on every gating eval set. "
        "no_detected_drop: the old rule (promote unless the paired test finds the candidate worse); it promotes a "
        "5-points-worse candidate ~39% of the time at 48 prompts.",
    )
    margin: float = Field(
        0.03,
        ge=0.0,
        le=1.0,
        description="Non-inferiority margin: the largest drop in held-out pass@1 (absolute) the gate may let through, "
        "vs the incumbent AND vs the best ever promoted (formerly 'tolerance').",
    )
    test: Literal["score", "bootstrap", "mcnemar"] = Field(
        "score",
        description="score: Tango's score bound for paired 0/1 outcomes (greedy); bootstrap: BCa cluster bootstrap "
        "(greedy outcomes or per-prompt means); mcnemar: exact McNemar, only with rule = 'no_detected_drop'.",
    )
    alpha: float = Field(
        0.05,
        gt=0.0,
        lt=1.0,
        description="One-sided error level: a candidate truly more than margin worse is promoted with probability <= alpha.",
    )
    max_consecutive_rejections: int = Field(2, ge=1, description="Halt the campaign after this many rejections in a row.")
    max_no_answer_rate: float = Field(
        0.5,
        gt=0.0,
        le=1.0,
        description="Halt when the candidate gives no parseable answer on more than this share of held-out prompts.",
    )
    bootstrap_samples: int = Field(2000, ge=100, description="Resamples of the bootstrap bound / test.")
    samples_per_prompt: int = Field(
        0,
        ge=0,
        description="0: gate on greedy outcomes (one per prompt). k >= 2: gate on paired pass@1 estimates, each prompt's "
        "mean correctness over its eval_sample completions (needs eval.num_samples >= k and test = 'bootstrap').",
    )
    sequential: bool = Field(
        False,
        description="Evaluate the candidate in batches of held-out prompts (pinned prompt-id order) and stop as soon as "
        "an anytime-valid bound decides (a betting confidence sequence, Waudby-Smith & Ramdas 2023), up to "
        "max_eval_prompts; the incumbent's outcomes on added prompts are computed once and stored.",
    )
    max_eval_prompts: int = Field(
        1000,
        ge=1,
        description="Sequential gate: the most held-out prompts a round evaluates (capped by the pinned eval set; raise "
        "tasks.heldout_prompts to allow more), also the horizon the bets are tuned for.",
    )
    sequential_batch_prompts: int = Field(
        100, ge=1, description="Sequential gate: held-out prompts added per look (each look re-checks the bounds)."
    )
    max_drift: float | None = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="Halt instead of promoting a candidate shown to have drifted more than this below the base "
        "checkpoint (pass@1, absolute) on a drift set: the guard sets, else the gating sets (the (1 - alpha) upper "
        "bound of candidate - base < -max_drift; ratchet.loop.gate.drift). None: measure and store drift, never halt.",
    )
    pass_at_k: int | None = Field(
        None,
        ge=2,
        description="K: each gating eval set must also show the candidate no worse than the incumbent and the base on "
        "the unbiased pass@K per prompt (Chen et al. 2021, eq. 1; BCa cluster bootstrap over prompts, margin and alpha "
        "as for pass@1): RL can raise pass@1 while narrowing what pass@K reaches (Yue et al. 2025). Needs "
        "eval.num_samples >= K samples per prompt at eval.temperature. None: off (the K samples cost ~K greedy "
        "evaluations; docs/gate.md).",
    )
    confirmation_prompts: int = Field(
        0,
        ge=0,
        description="Held-out prompts of the confirmation set, pinned beside the gating set and read only when a candidate "
        "is promoted: the promoted checkpoint's greedy pass@1 there is unbiased by the selection on the gating set (the "
        "gating score of a kept incumbent is biased upward; benchmarks/gate_longrun.py). 0: none. With "
        "[[evals]] sets: applied to each gating set (an entry's own confirmation_prompts overrides it), each set's "
        "slice drawn from that set's own reserve and its confirmed pass@1 stored and shown per set.",
    )
    refresh_after: int | None = Field(
        None,
        ge=1,
        description="After every N promotions, replace each gating set's prompts by as many fresh held-out prompts "
        "from its reserve (the held-out split minus every slice ever gated on and the confirmation slices: never "
        "trained on, never looked at), as a new eval set version (``eval_set_versions``: new and replaced "
        "eval_set_id); the incumbent and the best ever promoted are evaluated on it before the next decision, so the "
        "gate compares on the same prompts. Limits the selection's adaptation to one slice (docs/gate.md). When a "
        "reserve holds fewer fresh prompts than its set, one line says so and the current slice stays. None: never.",
    )
    monitors: MonitorsConfig = Field(
        MonitorsConfig(), description="[gate.monitors]: reward-hacking monitors that halt (ratchet.loop.gate.monitors)."
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy_keys(cls, data):
        """A ``[gate]`` written before non-inferiority: ``tolerance`` is ``margin``; ``test = 'mcnemar'`` without a
        rule is the old default, which now means the score bound (the score test that generalizes McNemar's)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "tolerance" in data:
            tol = data.pop("tolerance")
            if "margin" not in data:
                data["margin"] = tol
            _log.warning(
                "[gate] tolerance = %s is now gate.margin (rename the key; same meaning, the non-inferiority margin)", tol
            )
        if data.get("test") == "mcnemar" and "rule" not in data:
            data["test"] = "score"
            _log.warning(
                "[gate] test = 'mcnemar' is the old rule's test; the default non-inferiority rule bounds greedy outcomes with "
                "Tango's score interval (set gate.test = 'score', or gate.rule = 'no_detected_drop' to keep the old rule)"
            )
        return data

    @model_validator(mode="after")
    def _check_test(self) -> GateConfig:
        if self.samples_per_prompt == 1:
            raise ValueError("gate.samples_per_prompt = 1 is one sampled answer (noisier than greedy); use 0 (greedy) or >= 2")
        if self.samples_per_prompt and self.test != "bootstrap":
            raise ValueError(
                f"gate.samples_per_prompt = {self.samples_per_prompt} gives per-prompt means, which gate.test = "
                f"'{self.test}' cannot bound; set gate.test = 'bootstrap' (paired bootstrap) or gate.samples_per_prompt = 0"
            )
        if self.sequential and self.rule != "noninferiority":
            raise ValueError(
                "gate.sequential = true decides by anytime-valid non-inferiority bounds; set gate.rule = 'noninferiority' "
                "or gate.sequential = false"
            )
        if self.rule == "noninferiority" and self.test == "mcnemar":
            raise ValueError(
                "gate.test = 'mcnemar' is a test of 'worse', not a confidence bound; with gate.rule = 'noninferiority' "
                "use gate.test = 'score' (or 'bootstrap'), or set gate.rule = 'no_detected_drop'"
            )
        return self
