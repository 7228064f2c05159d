"""Ratchet verifiers: parse a completion, decide correctness, compose a scalar reward.

``verify(kind, gold, completion, ...)`` dispatches to the math or code verifier; ``score`` is the
composite reward; ``as_trl_reward`` adapts any of them to TRL. Must not import torch, Prefect or
the store (see DESIGN.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from ratchet.verifiers.code import verify_code, verify_code_batch
from ratchet.verifiers.format import check_format
from ratchet.verifiers.math import verify_math, verify_math_batch
from ratchet.verifiers.reward import as_trl_reward, score, score_batch
from ratchet.verifiers.verdict import REASONS, Verdict

__all__ = [
    "REASONS",
    "Verdict",
    "verify",
    "score",
    "score_batch",
    "as_trl_reward",
    "verify_math",
    "verify_math_batch",
    "verify_code",
    "verify_code_batch",
    "check_format",
]


def verify(
    kind: Literal["math", "code", "format"],
    gold: str,
    completion: str,
    *,
    timeout_s: float = 2.0,
    tests: Sequence[Any] | None = None,
) -> Verdict:
    """Verify one completion with the verifier for ``kind`` (for ``format``, ``gold`` is the template).

    Raises:
        ValueError: unknown kind, or ``kind="code"`` without tests.
    """
    if kind == "math":
        return verify_math(gold, completion, timeout_s=timeout_s)
    if kind == "code":
        if tests is None:
            raise ValueError("kind='code' needs tests (assert lines or stdio cases); pass tests=[...]")
        return verify_code(gold, completion, tests, timeout_s=timeout_s)
    if kind == "format":
        return check_format(completion, gold)
    raise ValueError(f"kind {kind!r} is unknown; use 'math', 'code' or 'format'")
