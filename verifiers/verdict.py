"""The result of verifying one completion: the contract between verifiers and the rest of Ratchet."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Reason = Literal[
    "ok",  # verified correct
    "wrong",  # parsed, compared, not equal
    "no_answer",  # no final answer could be extracted
    "ambiguous",  # several different final answers, or a hedged list of candidates
    "parse_error",  # an answer was found but could not be parsed completely
    "timeout",  # the check ran past its hard time limit and was killed
    "sandbox_violation",  # a program broke a sandbox rule (resource limit, tampering, ...)
    "format_error",  # the completion breaks the required structure
    "runtime_error",  # a program crashed or a test failed with an exception
    "bad_gold",  # the gold answer itself could not be parsed: a task-data problem, not the model's
    "verifier_error",  # a user's verifier raised, hung or returned a result of the wrong type (reward 0, not trained on)
]

REASONS: tuple[str, ...] = Reason.__args__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Verdict:
    """One verifier's judgement of one completion.

    Attributes:
        correct: the outcome (True only when the answer was extracted, parsed and judged equal).
        reward: scalar reward in [0, 1 + format_weight]; see ``verifiers.reward``.
        reason: why, one of ``REASONS``; failures are counted by reason per round.
        parsed: canonical text of the parsed final answer, or None when none was extracted.
        verifier: verifier name (``"math"``, ``"code"``, ``"format"``, ``"composite"``).
        verifier_version: bumped whenever a change can flip a verdict; stored with every verdict.
        latency_s: wall seconds spent verifying this completion.
        format_ok: whether the completion satisfied the format rule (None when not checked).
        details: small JSON-able extras (per-test results, timings); never large blobs.
        read_chars: how many leading characters of the completion the verifier read (None: all of it); what lies
            past it was never graded, so it is never trained on.
    """

    correct: bool
    reward: float
    reason: str
    parsed: str | None
    verifier: str
    verifier_version: str
    latency_s: float = 0.0
    format_ok: bool | None = None
    details: dict[str, Any] = field(default_factory=dict)
    read_chars: int | None = None

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"reason {self.reason!r} is not one of {REASONS}; add it to verifiers.verdict.Reason")
        if self.correct and self.reason != "ok":
            raise ValueError(f"a correct verdict must have reason 'ok', got {self.reason!r}")

    @classmethod
    def outcome(cls, verifier: str, version: str, reason: str, t0: float, parsed: str | None = None, **details: Any) -> Verdict:
        """An outcome verifier's verdict: reward 1.0 iff ``reason == "ok"``; ``latency_s`` since ``t0``
        (``time.perf_counter()``); details whose value is None are left out."""
        ok = reason == "ok"
        return cls(
            correct=ok,
            reward=1.0 if ok else 0.0,
            reason=reason,
            parsed=parsed,
            verifier=verifier,
            verifier_version=version,
            latency_s=time.perf_counter() - t0,
            details={k: v for k, v in details.items() if v is not None},
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
