"""Golden tables (gold, prediction, expected) for the math verifier: the examples of each policy clause
(``ratchet.verifiers.math.policy.CLAUSES``, rendered as docs/verifier-policy.md)."""

import pytest

from ratchet.verifiers.math import extract_answer, parse_answer, verify_math, verify_math_batch
from ratchet.verifiers.math.policy import CLAUSES


@pytest.mark.parametrize("theme", [c.name for c in CLAUSES])
def test_golden_table(theme: str) -> None:
    clause = next(c for c in CLAUSES if c.name == theme)
    table = clause.examples
    verdicts = verify_math_batch([(g, p) for g, p, _ in table], timeout_s=5.0, choices=[clause.choices] * len(table))
    wrong = [(g, p, e, v.reason) for (g, p, e), v in zip(table, verdicts) if v.correct != e]
    assert not wrong, wrong


def test_verify_math_matches_batch() -> None:
    assert verify_math("1000", r"\boxed{1,000}").correct
    assert verify_math("1000", r"\boxed{1,000}").verifier == "math"


def test_reasons() -> None:
    assert verify_math("3", "no answer here").reason == "no_answer"
    assert verify_math("3", r"\boxed{2} \boxed{3}").reason == "ambiguous"
    assert verify_math("2", r"\boxed{9^{9^{9}}}").reason == "timeout"
    assert verify_math(r"\frac{1}{", r"\boxed{3}").reason == "bad_gold"
    assert verify_math("3", r"\boxed{3 )}").reason == "parse_error"


def test_no_code_execution(tmp_path) -> None:
    marker = tmp_path / "rce"
    pred = r"\boxed{exec(chr(95)+'import os; os.system(\"touch " + str(marker) + r"\")')+0*\pi}"
    v = verify_math(r"\pi", pred)
    assert not v.correct
    assert not marker.exists()


def test_last_number_fallback_is_opt_in() -> None:
    assert verify_math("5", "so we get 5").reason == "no_answer"
    assert verify_math("5", "so we get 5", fallback_last_number=True).correct


def test_two_stage_api() -> None:
    ex = extract_answer(r"<think>\boxed{1}</think> so \boxed{\frac{2}{4}}")
    assert ex.status == "ok" and ex.text == r"\frac{2}{4}"
    assert parse_answer(ex.text).canonical() == "1/2"
