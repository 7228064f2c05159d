"""Golden tables (gold, prediction, expected) for the math verifier, grouped by theme."""

import pytest

from ratchet.verifiers.math import extract_answer, parse_answer, verify_math, verify_math_batch

NUMBERS = [
    ("1000", r"\boxed{1,000}", True),
    ("1000", r"\boxed{1{,}000}", True),
    ("1500", r"\boxed{1.5e3}", True),
    ("1500", r"\boxed{1.5 \times 10^{3}}", True),
    (r"\frac{1}{2}", r"\boxed{\frac{2}{4}}", True),
    (r"\frac{1}{2}", r"\boxed{0.5}", True),
    (r"\frac{1}{2}", r"\boxed{1/2}", True),
    (r"-\frac{3}{4}", r"\boxed{\frac{-3}{4}}", True),
    (r"\frac{7}{3}", r"\boxed{2\frac{1}{3}}", True),
    ("5", r"\boxed{500}", False),
    ("5", r"\boxed{0.05}", False),
    ("-3", r"\boxed{3}", False),
    ("2.50", r"\boxed{2.5}", True),
]
TOLERANCE = [
    ("约为3.14", r"所以结果是 $\boxed{3.14}$。", True),
    ("approximately 2.72", r"\boxed{2.718}", True),
    ("2.72", "Answer: 2.718", False),  # unmarked decimal gold: exact against a decimal
    ("82.0", r"\boxed{82.01}", False),
    ("82.0", r"\boxed{82+\frac{1}{100}}", False),
    ("0.33", r"\boxed{\frac{1}{3}}", True),
    ("approximately 2.72", "Answer: 2.7", False),
    ("2.72", "Answer: 2.7", False),
    ("0.5", r"\boxed{0.54}", False),
    (r"\pi", r"\boxed{3.14}", False),
    (r"\sqrt{2}", r"\boxed{1.41}", False),
    ("1.41", r"\boxed{\sqrt{2}}", True),
    (r"\frac{1}{3}", r"\boxed{0.333}", False),
]
PERCENT_UNITS_DEGREES = [
    (r"50\%", r"\boxed{0.5}", True),
    (r"50\%", r"\boxed{50}", True),
    (r"50\%", r"\boxed{50\%}", True),
    (r"50\%", r"\boxed{0.05}", False),
    (r"30^\circ", r"\boxed{30}", True),
    ("30", r"\boxed{30^{\circ}}", True),
    ("12", r"\boxed{12 \text{ cm}}", True),
]
CHOICES = [
    (r"\text{(B)}", r"\boxed{B}", True),
    ("B", r"\boxed{\textbf{(B)}}", True),
    ("B", r"\boxed{(C)}", False),
    ("A", r"the answer is $\boxed{B, A}$", False),
]
STRUCTURES = [
    ("[1,2)", r"\boxed{(1,2]}", False),
    ("[1,2)", r"\boxed{[1,2)}", True),
    (r"\{1,2\}", r"\boxed{\{2,1\}}", True),
    (r"\{1,2\}", r"\boxed{\{1,2,3\}}", False),
    ("(1,2)", r"\boxed{(2,1)}", False),
    ("1331 and 1728", r"\boxed{1728, 1331}", True),
    ("1331 and 1728", r"\boxed{1728}", False),
    ("3", r"\boxed{x=3}", True),
    (r"\text{Monday}", "Answer: Monday", True),
]
SYMBOLIC = [
    (r"\frac{\sqrt{2}}{2}", r"\boxed{\frac{1}{\sqrt{2}}}", True),
    (r"2\pi", r"\boxed{2 \pi}", True),
    (r"x^2+2x+1", r"\boxed{(x+1)^2}", True),
    (r"x^2+2x+1", r"\boxed{(x-1)^2}", False),
    (r"y=2x+1", r"\boxed{y = 1 + 2x}", True),
]
EXTRACTION = [
    ("3", r"The answer is $\boxed{2}$ or maybe $\boxed{3}$.", False),
    ("7", "<think>Let me compute... the answer is 7.</think><answer>I am not sure.</answer>", False),
    ("7", "<think>maybe 5</think><answer>7</answer>", True),
    ("12", "The answer is one of 12, 15 or 18.", False),
    ("1728", "The only such cube is 1728.", False),
    ("42", "Work...\nAnswer: 42", True),
    ("42", r"\boxed{42} and again \boxed{42}", True),
]


@pytest.mark.parametrize(
    "theme", ["NUMBERS", "TOLERANCE", "PERCENT_UNITS_DEGREES", "CHOICES", "STRUCTURES", "SYMBOLIC", "EXTRACTION"]
)
def test_golden_table(theme: str) -> None:
    table = globals()[theme]
    verdicts = verify_math_batch([(g, p) for g, p, _ in table], timeout_s=5.0)
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
