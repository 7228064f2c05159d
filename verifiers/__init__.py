"""Ratchet verifiers: parse a completion, decide correctness, compose a scalar reward.

``verify(kind, gold, completion, ...)`` dispatches to the math, code or Lean verifier; ``score`` is the
composite reward; ``as_trl_reward`` adapts any of them to TRL. Must not import torch, Prefect or
the store (the import contracts in pyproject.toml; docs/layout.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from ratchet.verifiers.code import verify_code, verify_code_batch
from ratchet.verifiers.format import check_format
from ratchet.verifiers.language import language_share
from ratchet.verifiers.lean import LeanServerError, verify_lean, verify_lean_batch
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
    "verify_lean",
    "verify_lean_batch",
    "LeanServerError",
    "language_share",
]


def verify(
    kind: Literal["math", "code", "lean", "format"],
    gold: str,
    completion: str,
    *,
    timeout_s: float = 2.0,
    tests: Sequence[Any] | None = None,
    lean_url: str | None = None,
) -> Verdict:
    """Verify one completion with the verifier for ``kind`` (for ``format``, ``gold`` is the template;
    for ``lean``, the formal statement, checked by the Lean server at ``lean_url``, ``timeout_s`` per proof).

    Raises:
        ValueError: unknown kind, or ``kind="code"`` without tests.
        LeanServerError: ``kind="lean"`` and the Lean server cannot be reached.
    """
    if kind == "math":
        return verify_math(gold, completion, timeout_s=timeout_s)
    if kind == "code":
        if tests is None:
            raise ValueError("kind='code' needs tests (assert lines or stdio cases); pass tests=[...]")
        return verify_code(gold, completion, tests, timeout_s=timeout_s)
    if kind == "lean":
        return verify_lean(gold, completion, url=lean_url, timeout_s=timeout_s)
    if kind == "format":
        return check_format(completion, gold)
    raise ValueError(f"kind {kind!r} is unknown; use 'math', 'code', 'lean' or 'format'")
