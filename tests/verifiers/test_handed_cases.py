"""The handed verifier cases (minimal forms of real grader failures) pass with zero false positives."""

from pathlib import Path

import pytest

from ratchet.verifiers.audit import audit_exit_code, run_audit

CASES = Path(__file__).parents[2].parent / "shared" / "cases" / "verifier_cases.jsonl"


@pytest.mark.skipif(not CASES.exists(), reason=f"{CASES} not present")
def test_handed_cases_all_pass() -> None:
    report = run_audit(CASES)
    assert report["false_positives"] == 0 and audit_exit_code(report) == 0
    assert report["passed"] == report["total"], report["misses"]
