"""Audit the verifiers on labelled cases: counts of true/false positives/negatives and every miss.

A cases file is JSON lines with fields ``id``, ``kind`` (``math`` | ``code`` | ``format``), ``gold``,
``prediction``, ``expected`` (bool), optional ``why``, for math an optional ``answer_format`` (``auto`` when
omitted; ``verifiers.math.ANSWER_FORMATS``) and, for code, ``tests``. For ``format``
cases the gold is a human description of the rule; the template is chosen by
``verifiers.format.template_for_rule``. ``ratchet audit CASES.jsonl`` fails (exit 1) on any false
positive: a verifier that accepts a wrong answer teaches the policy to cheat.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ratchet.verifiers.code import verify_code_batch
from ratchet.verifiers.code.sandbox import default_isolation
from ratchet.verifiers.format import check_format, template_for_rule
from ratchet.verifiers.math import ANSWER_FORMATS, verify_math_batch

KINDS = ("math", "code", "format")
_REQUIRED = {"id": str, "kind": str, "gold": str, "prediction": str, "expected": bool}


class CasesFileError(ValueError):
    """A line of the cases file is malformed; the message names the line and the problem."""


def load_cases(path: str | Path) -> list[dict[str, Any]]:
    """Read and validate a cases file.

    Raises:
        CasesFileError: naming the 1-based line number, what is wrong and how to fix it.
        FileNotFoundError: the file does not exist.
    """
    cases = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            case = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CasesFileError(
                f"{path}:{n}: not valid JSON ({exc.msg} at column {exc.colno}); each line must be one JSON object"
            ) from None
        if not isinstance(case, dict):
            raise CasesFileError(f"{path}:{n}: expected a JSON object, got {type(case).__name__}")
        for key, typ in _REQUIRED.items():
            if key not in case:
                raise CasesFileError(f"{path}:{n}: missing field {key!r}; required fields are {sorted(_REQUIRED)}")
            if not isinstance(case[key], typ):
                raise CasesFileError(f"{path}:{n}: field {key!r} must be {typ.__name__}, got {case[key]!r}")
        if case["kind"] not in KINDS:
            raise CasesFileError(f"{path}:{n}: kind {case['kind']!r} is not one of {KINDS}")
        if case.get("answer_format", "auto") not in ANSWER_FORMATS:
            raise CasesFileError(
                f"{path}:{n}: answer_format {case['answer_format']!r} is not one of {ANSWER_FORMATS}; omit it for auto"
            )
        if case["kind"] == "code" and not isinstance(case.get("tests"), list):
            raise CasesFileError(f"{path}:{n}: a code case needs a 'tests' list (assert lines or stdio cases)")
        case["_line"] = n
        cases.append(case)
    return cases


def _empty() -> dict[str, int]:
    return {
        "total": 0,
        "passed": 0,
        "true_positives": 0,
        "true_negatives": 0,
        "false_positives": 0,
        "false_negatives": 0,
        "errors": 0,
    }


def run_audit(path: str | Path, *, timeout_s: float = 2.0) -> dict[str, Any]:
    """Run every case through its verifier and tally the outcome against the label.

    Args:
        path: a cases file (see module docstring).
        timeout_s: per-item hard limit for the math sympy stage and each sandboxed program.

    Returns:
        ``{"total", "passed", "false_positives", "false_negatives", "errors", "by_kind": {kind:
        {same counts}}, "misses": [{"id", "kind", "expected", "got", "reason"}]}`` plus ``true_positives`` and
        ``true_negatives`` at each level; ``errors``
        counts verdicts whose reason is ``bad_gold`` (the case itself is unusable); ``passed`` is
        true positives plus true negatives; ``isolation``: the code sandbox's mode (``"kernel"`` or
        ``"weak"``, ``RATCHET_CODE_ISOLATION``).

    Raises:
        SandboxUnavailable: code cases and kernel isolation is unavailable (one line naming what is missing).
    """
    cases = load_cases(path)
    isolation = default_isolation()
    by_kind = {k: [c for c in cases if c["kind"] == k] for k in KINDS}
    verdicts: dict[int, Any] = {}
    math = by_kind["math"]
    formats = [c.get("answer_format", "auto") for c in math]  # a math case may declare its answer format
    for c, v in zip(
        math, verify_math_batch([(c["gold"], c["prediction"]) for c in math], timeout_s=timeout_s, answer_format=formats)
    ):
        verdicts[id(c)] = v
    code = by_kind["code"]
    for c, v in zip(
        code,
        verify_code_batch([(c["gold"], c["prediction"], c["tests"]) for c in code], timeout_s=timeout_s, isolation=isolation),
    ):
        verdicts[id(c)] = v
    for c in by_kind["format"]:
        verdicts[id(c)] = check_format(c["prediction"], template_for_rule(c["gold"]))
    total = _empty()
    report: dict[str, Any] = {"by_kind": {}, "misses": []}
    for kind in KINDS:
        counts = _empty()
        for c in by_kind[kind]:
            v = verdicts[id(c)]
            counts["total"] += 1
            if v.reason == "bad_gold":
                counts["errors"] += 1
            elif v.correct == c["expected"]:
                counts["passed"] += 1
                counts["true_positives" if v.correct else "true_negatives"] += 1
            else:
                counts["false_positives" if v.correct else "false_negatives"] += 1
            if v.reason == "bad_gold" or v.correct != c["expected"]:
                report["misses"].append(
                    {
                        "id": c["id"],
                        "kind": kind,
                        "expected": c["expected"],
                        "got": v.correct,
                        "reason": v.reason + (f": {v.details['error']}" if v.details.get("error") else ""),
                    }
                )
        if counts["total"]:
            report["by_kind"][kind] = counts
        for k in total:
            total[k] += counts[k]
    return {**total, **report, "isolation": isolation}


def audit_exit_code(report: dict[str, Any]) -> int:
    """1 when any false positive was found, else 0 (false negatives are reported, not fatal)."""
    return 1 if report["false_positives"] else 0


_JSON_COUNTS = ("total", "passed", "false_positives", "false_negatives", "errors")


def _spec_shape(report: dict[str, Any]) -> dict[str, Any]:
    """The documented JSON: top-level and per-kind counts without the true positive/negative split."""
    return {
        **{k: report[k] for k in _JSON_COUNTS},
        "by_kind": {kind: {k: c[k] for k in _JSON_COUNTS} for kind, c in report["by_kind"].items()},
        "misses": report["misses"],
        "isolation": report.get("isolation", "kernel"),
    }


def audit_json(report: dict[str, Any]) -> str:
    """A ``run_audit`` report as one JSON object (the documented shape, plus ``isolation``); the CLI renders tables."""
    return json.dumps(_spec_shape(report), indent=2, sort_keys=False)
