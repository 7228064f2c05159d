"""Judging stdin/stdout cases: the program's output against the expected (or the reference solution's) stdout."""

from __future__ import annotations

from typing import Any

from ratchet.verifiers.code.budget import Runs, trusted_failure
from ratchet.verifiers.code.program import extract_code
from ratchet.verifiers.code.records import failure


def _norm_out(s: str) -> list[str]:
    lines = [ln.rstrip() for ln in s.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def run_stdio(program: str, gold: str | None, cases: list[tuple[str, str | None]], runs: Runs) -> tuple[str, dict[str, Any]]:
    passed = 0
    for i, (stdin, expected) in enumerate(cases):
        if expected is None:
            if not gold:
                return "bad_gold", {"error": f"stdio test {i} has no expected stdout and no reference solution"}
            ref = runs.run({"mode": "stdio", "program": extract_code(gold)}, stdin.encode())
            bad = failure(ref)
            if bad:
                reason, details = trusted_failure(runs, f"reference solution on stdio test {i}", bad)
                return reason, {**details, "passed": passed, "total": len(cases)}
            expected = ref.stdout.decode("utf-8", "replace")
        res = runs.run({"mode": "stdio", "program": program}, stdin.encode())
        bad = failure(res)
        if bad:
            return bad[0], {**bad[1], "passed": passed, "total": len(cases)}
        if _norm_out(res.stdout.decode("utf-8", "replace")) != _norm_out(expected):
            return "wrong", {"passed": passed, "total": len(cases), "failed_case": i}
        passed += 1
    return "ok", {"passed": passed, "total": len(cases)}
