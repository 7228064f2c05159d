"""Config of the reward: ``[verifier]``, the format, outcome and language terms every scorer reads (see ``ratchet.loop.config``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ratchet.loop.config.frozen import _Frozen, identity
from ratchet.verifiers.language import LANGUAGES
from ratchet.verifiers.math import AnswerFormat
from ratchet.verifiers.reward import DEFAULT_REWARD


class VerifierConfig(_Frozen):
    """``[verifier]``: the reward's settings, defaults from ``verifiers.reward.RewardSpec`` (``DEFAULT_REWARD``), except
    the format rule, which a campaign's prompts ask for (``answer_line``; a bare ``RewardSpec`` has no format term)."""

    format_template: Literal["none", "answer_line", "think_answer"] = Field(
        "answer_line", description="Structure rule for the format reward (verifiers.format)."
    )
    format_weight: float = Field(
        DEFAULT_REWARD.format_weight, ge=0.0, description="Reward for a well-formed completion, added to outcome 1.0."
    )
    answer_format: AnswerFormat = Field(
        DEFAULT_REWARD.answer_format,
        description="Final-answer marker the math verifier reads: 'auto' (every marker it knows, in the documented precedence: "
        "<answer> tag > JSON 'answer' field > the last explicit final answer among \\boxed{} and answer lines > 'the "
        "answer is X' > a concluding sentence; disagreeing markers are ambiguous), or only one: 'boxed', 'answer_line' "
        "('Answer: X' / 'A: X' lines), 'json' (an \"answer\" field), 'gsm8k' ('#### X'). Recorded in each verdict's details.",
        json_schema_extra=identity("neutral_default"),
    )
    timeout_s: float = Field(
        DEFAULT_REWARD.timeout_s, gt=0.0, description="Hard per-item limit on a symbolic equivalence check, seconds."
    )
    format_prefix: str = Field(
        DEFAULT_REWARD.format_prefix,
        description="Text the chat template pre-fills at the start of every generation (e.g. '<think>\\n' for "
        "R1-distill / Qwen3 thinking templates): the format check reads it before the completion, else every completion "
        "would miss its opening tag and the format reward would be constant.",
        json_schema_extra=identity("neutral_default"),
    )
    code_isolation: Literal["kernel", "weak"] = Field(
        "kernel",
        description="Code sandbox wall. 'kernel': bubblewrap namespaces, read-only runtime, tmpfs disk quota, rlimits; "
        "code verification is refused where the kernel cannot give it. 'weak': rlimits, a per-run uid as root and a "
        "Python audit hook only (a program can switch the hook off): only for trusted programs on machines without "
        "user namespaces.",
    )
    language_weight: float = Field(
        DEFAULT_REWARD.language_weight,
        ge=0.0,
        le=1.0,
        description="Weight of the language-consistency reward: share of the completion's letters in target_language's "
        "script, added to the outcome (DeepSeek-R1 section 2.3.2, against language mixing in the chain of thought). "
        "0 = off; R1 traded a slight accuracy loss for readable output, so start small (0.1).",
        json_schema_extra=identity("neutral_default"),
    )
    target_language: str = Field(
        DEFAULT_REWARD.target_language,
        description="Language the completions must be written in, for language_weight: 'none' or one of "
        f"{', '.join(sorted(LANGUAGES))} (script-based: en/fr/de/es all count as Latin).",
        json_schema_extra=identity("neutral_default"),
    )
    cross_check: Literal["math_verify"] | None = Field(
        None,
        description="A second verifier run on the candidate's and incumbent's greedy evaluation completions at the gate: "
        "'math_verify' (HuggingFace Math-Verify, `pip install math-verify`); their disagreement is the "
        "gate.monitors.cross_check_disagreement monitor. Never part of the reward.",
        json_schema_extra=identity("run"),
    )
    lean_url: str = Field(
        "http://localhost:8000",
        description="Kimina Lean Server the Lean verifier posts proofs to (you run it; POST /api/check). "
        "Its API key comes from $LEAN_SERVER_API_KEY.",
        json_schema_extra=identity("neutral_default"),
    )
    lean_timeout_s: float = Field(
        60.0,
        gt=0.0,
        description="Lean's limit per proof on the server, seconds (whole seconds).",
        json_schema_extra=identity("neutral_default"),
    )

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
