"""The handed verifier cases (minimal forms of real grader failures) pass with zero false positives."""

import json
from pathlib import Path

import pytest

from ratchet.verifiers.audit import audit_exit_code, run_audit

# the shared cases folder beside the checkout (/work/shared for /work/main and for a worktree /work/wt/NAME)
CASES_DIR = next(
    (p / "shared" / "cases" for p in Path(__file__).parents[2].parents if (p / "shared" / "cases").is_dir()),
    Path(__file__).parents[2].parent / "shared" / "cases",
)
CASES = CASES_DIR / "verifier_cases.jsonl"
TURN2 = CASES_DIR / "verifier_cases_turn2.jsonl"
LATER_TURNS = [CASES_DIR / f"verifier_cases_turn{n}.jsonl" for n in (3, 4)]


@pytest.mark.skipif(not CASES.exists(), reason=f"{CASES} not present")
def test_handed_cases_all_pass() -> None:
    report = run_audit(CASES)
    assert report["false_positives"] == 0 and audit_exit_code(report) == 0
    assert report["passed"] == report["total"], report["misses"]


@pytest.mark.skipif(not TURN2.exists(), reason=f"{TURN2} not present")
def test_turn2_math_and_format_cases_all_pass(tmp_path: Path) -> None:
    """Issue 13's handed cases (the code ones belong to the code verifier's tests)."""
    rows = [r for r in map(json.loads, TURN2.read_text().splitlines()) if r["kind"] in ("math", "format")]
    cases = tmp_path / "turn2_math_format.jsonl"
    cases.write_text("\n".join(json.dumps(r) for r in rows))
    report = run_audit(cases)
    assert report["total"] == len(rows) >= 19
    assert report["passed"] == report["total"], report["misses"]


@pytest.mark.parametrize("path", LATER_TURNS, ids=lambda p: p.stem)
def test_later_turns_all_pass(path: Path) -> None:
    """Issues 35 and 38's handed cases (math only): every one passes, with no false positive."""
    if not path.exists():
        pytest.skip(f"{path} not present")
    report = run_audit(path)
    assert report["false_positives"] == 0, report["misses"]
    assert report["passed"] == report["total"], report["misses"]
