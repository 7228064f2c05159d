"""Ratchet's own verifiers as plugins (entry points of ``ratchet.verifiers``, declared in ``pyproject.toml``).

``verifier = "math"`` on a ``records`` source judges the completion with the math verifier against the record's
``answer`` field (else ``reference``); ``verifier = "exact"`` compares the completion's last non-empty line with it,
whitespace-trimmed. To read the gold from another field, wrap the function in a module of your own::

    # my_checks.py, next to ratchet.toml: verifier = "my_checks:verify"
    from ratchet.verifiers.math import verify_math

    def verify(completion, record):
        return verify_math(str(record["solution_value"]), completion)   # a Verdict: kept as it is
"""

from __future__ import annotations

from typing import Any

from ratchet.verifiers.math import VERSION as MATH_VERSION
from ratchet.verifiers.math import verify_math
from ratchet.verifiers.verdict import Verdict

GOLD_FIELDS = ("answer", "reference")


def _gold(record: dict[str, Any]) -> str:
    for key in GOLD_FIELDS:
        if record.get(key) not in (None, ""):
            return str(record[key])
    raise ValueError(f"the record has none of the fields {list(GOLD_FIELDS)}; give each record its gold answer")


def math_answer(completion: str, record: dict[str, Any]) -> Verdict:
    """The math verifier (``verify_math``) on the record's ``answer`` (else ``reference``) field.

    Raises:
        ValueError: the record has neither field (a ``verifier_error`` verdict when run as a plugin).
    """
    return verify_math(_gold(record), completion)


def exact_answer(completion: str, record: dict[str, Any]) -> bool:
    """Whether the completion's last non-empty line equals the record's ``answer`` (else ``reference``), trimmed.

    Raises:
        ValueError: the record has neither field.
    """
    lines = [ln.strip() for ln in completion.splitlines() if ln.strip()]
    return bool(lines) and lines[-1] == _gold(record).strip()


math_answer.version = MATH_VERSION  # type: ignore[attr-defined]  # a math-verifier release is a new plugin version
exact_answer.version = "1"  # type: ignore[attr-defined]
