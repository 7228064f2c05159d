"""Recall classes of math-1.4.0 (issue 25: the formats real models write): properties and the answer formats.

The golden rows of each class (right and wrong) are clauses of ``ratchet.verifiers.math.policy`` (from
``A_LINES`` to ``TRUTH_VALUES``), run by ``test_golden.py``; here are the properties that
fit a class (a confirmation after the answer, a JSON answer field, an invented next question, an ``A:`` line
never change the verdict) and the ``answer_format`` setting end to end.
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet.verifiers.math import ANSWER_FORMATS, VERSION, extract_answer, verify_math, verify_math_batch


def test_version_bumped() -> None:
    assert VERSION == "math-1.5.0"


# ---------------------------------------------------------------------------------------------- properties

values = st.integers(-(10**6), 10**6).map(str)
marked = st.sampled_from(["\\boxed{{{v}}}", "The answer is {v}.", "Answer: {v}", "#### {v}", "<answer>{v}</answer>"])
confirmations = st.sampled_from(
    [
        "This answer is correct.",
        "This answer is correct.\nThis answer is correct.",
        "However, to be sure, let us check: it confirms the answer.",
        "However, to verify, we substitute back, which confirms it.",
        "We can verify that this is correct.",
    ]
)


@settings(max_examples=60, deadline=None)
@given(values, values, marked, confirmations)
def test_confirmation_after_answer_never_changes_the_verdict(gold: str, value: str, form: str, confirm: str) -> None:
    completion = "We compute it step by step.\n" + form.format(v=value)
    plain, confirmed = verify_math_batch([(gold, completion), (gold, completion + "\n" + confirm)])
    assert (plain.reason, plain.parsed) == (confirmed.reason, confirmed.parsed)


@settings(max_examples=60, deadline=None)
@given(values, values, st.sampled_from(["{v}", "\\\\boxed{{{v}}}"]), st.booleans(), st.booleans())
def test_json_answer_field_never_changes_the_verdict(gold: str, value: str, form: str, fenced: bool, number: bool) -> None:
    field = value if number and form == "{v}" else json.dumps(form.format(v=value).replace("\\\\", "\\"))
    obj = '{"reasoning": "we compute it", "answer": ' + field + "}"
    wrapped = f"```json\n{obj}\n```" if fenced else obj
    line, structured = verify_math_batch([(gold, f"Answer: {value}"), (gold, wrapped)])
    assert line.correct == structured.correct and line.parsed == structured.parsed


@settings(max_examples=60, deadline=None)
@given(values, values, marked, st.sampled_from(["Q: ", "Question: ", "Problem:\n", "Q 2: "]), values)
def test_invented_next_question_never_changes_the_verdict(gold: str, value: str, form: str, opener: str, other: str) -> None:
    completion = "We compute it.\n" + form.format(v=value)
    invented = f"{completion}\n\n{opener}Tom has {other} cars. How many?\nThe answer is {other}.\nA: {other}"
    plain, continued = verify_math_batch([(gold, completion), (gold, invented)])
    assert (plain.reason, plain.parsed) == (continued.reason, continued.parsed)


@settings(max_examples=40, deadline=None)
@given(values, values)
def test_a_line_reads_like_an_answer_line(gold: str, value: str) -> None:
    a, answer = verify_math_batch([(gold, f"We compute it.\nA: {value}"), (gold, f"We compute it.\nAnswer: {value}")])
    assert (a.reason, a.parsed) == (answer.reason, answer.parsed)


# ---------------------------------------------------------------------------------------------- red team

REDTEAM = [  # (gold, completion) shaped to farm the new rules: none may be credited
    ("12", "Step 1: 3 * 4 = 12.\nStep 2: 12 + 5 = 17.\nStep 3: we now need"),  # cut off
    ("12", "A: 12\nB: 15\nC: 18\nD: 21\nThe correct option is B."),
    ("12", '{"answer": "12 or 15"}'),
    ("12", '{"answer": "12"} Actually, the answer is 15.'),
    ("12", '{"guess": "12", "answer": "15"}'),
    ("12", "The answer is 12.\nQuestion: is this right? Wait, I made an error; it is 15."),
    ("12", "Therefore a + b = 5 + 7 = 12, but this violates the constraint, so a + b = 15."),
    ("12", "So 5 + 7 = 12 is not the total. The total is 15."),
    ("12", "Therefore a + b = 5 + 7 = 12"),  # no full stop: maybe cut off
    ("12", "Answer: If x = 5, then y = 12."),
    ("12", "Answer: If we double it, 12, otherwise 6."),
    ("12", "<answer>If n is even, the result is 12.</answer>"),
    ("12", "\\boxed{12}. However, to be sure, let us check: 3 * 4 = 12, which confirms it. But wait, the question asks for 15."),
    ("12", "\\boxed{12}. However, to verify: 3 * 4 = 13, which is incorrect."),
    ("12", "The answer is 12?\nThis answer is correct."),
    ("12", "\\boxed{x = 12} and \\boxed{y = 15}"),
    ("12", "\\boxed{12^{\\text{th}} \\text{ root}}"),
    ("True", "The answer is No."),
    ("True", "\\boxed{False}"),
    ("4", "\\boxed{g(4) = 5}"),
    ("4", "So $f(x) = 4$ for all x, hence $f(3) = 7$."),
    ("45", "The tank holds 5 * 9 = 45 liters when full. The pipe drains 45 liters per hour.\nHow long does it take?"),
    ("45", "She computes 5 * 9 = 45.\nShe then gives away 45 apples?"),
    ("9", "Q: Tom has 4 cars.\nA: 9 minus something\n"),
    ("9", "We have 12 - 3 = 9.\nLet the total be 9."),
    ("9", "We have 12 - 3 = 9.\nSuppose the total is 9."),
    ("70", "Sum of all such bases: 21 + 49 = 70? Let me verify."),
    ("70", "Sum of all such bases: 21 + 49 = 70, but 21 is not valid."),
    ("36", '```json\n{"answer": "36"}\n```\n```json\n{"answer": "12"}\n```'),
    ("36", '{"answer": ""}\nThe answer is 36.'),  # empty field then phrase
]


def test_the_new_rules_credit_no_farmed_output() -> None:
    credited = [(g, c, v.reason) for (g, c), v in zip(REDTEAM, verify_math_batch(REDTEAM)) if v.correct]
    assert not credited, credited


# ---------------------------------------------------------------------------------------------- answer_format

BOTH = "Working: \\boxed{12}.\nAnswer: 13\n#### 14\n" + '{"answer": "15"}'


@pytest.mark.parametrize(("fmt", "value"), [("boxed", "12"), ("answer_line", "13"), ("gsm8k", "14"), ("json", "15")])
def test_declared_format_reads_only_its_marker(fmt: str, value: str) -> None:
    v = verify_math(value, BOTH, answer_format=fmt)
    assert v.correct and v.details["answer_format"] == fmt
    others = [x for x in ("12", "13", "14", "15") if x != value]
    assert not any(verify_math(o, BOTH, answer_format=fmt).correct for o in others)


def test_auto_refuses_disagreeing_markers_and_records_the_format() -> None:
    v = verify_math("15", BOTH)
    assert not v.correct and v.reason == "ambiguous" and v.details["answer_format"] == "auto"


def test_declared_format_missing_is_no_answer() -> None:
    assert verify_math("12", "The answer is 12.", answer_format="boxed").reason == "no_answer"
    assert verify_math("12", "\\boxed{12}", answer_format="json").reason == "no_answer"
    assert extract_answer("#### 12", answer_format="answer_line").status == "no_answer"


def test_unknown_format_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="answer_format 'xml' is unknown; use one of auto, boxed"):
        verify_math("1", "\\boxed{1}", answer_format="xml")
    with pytest.raises(ValueError, match="2 answer formats for 1 pairs"):
        verify_math_batch([("1", "\\boxed{1}")], answer_format=["auto", "boxed"])
    assert ANSWER_FORMATS == ("auto", "boxed", "answer_line", "json", "gsm8k")


def test_format_per_source_reaches_the_verdict() -> None:
    from pydantic import ValidationError

    from ratchet.loop.config import TaskSourceConfig, VerifierConfig
    from ratchet.loop.evaluation.scoring import reward_spec, score_items

    assert VerifierConfig().answer_format == "auto"
    with pytest.raises(ValidationError):
        VerifierConfig(answer_format="xml")  # type: ignore[arg-type]
    assert "answer_format" not in TaskSourceConfig(path="data/gsm.jsonl").model_dump()  # stored campaigns keep their settings
    sources = [TaskSourceConfig(path="data/gsm.jsonl", answer_format="gsm8k").model_dump()]
    spec = reward_spec({**VerifierConfig().model_dump(), "format_template": "none"}, sources)
    assert spec.source_formats == (("gsm", "gsm8k"),) and spec.format_for("other") == "auto"
    prompts = [{"answer": "14", "source": "gsm"}, {"answer": "13", "source": "other"}]
    scored = score_items([BOTH, "Answer: 13"], prompts, spec)
    assert [v.correct for _, v in scored] == [True, True]
    assert [v.details["answer_format"] for _, v in scored] == ["gsm8k", "auto"]
    with pytest.raises(ValueError, match="answer_format 'xml' is unknown"):
        spec.with_settings(answer_format="xml")


def test_audit_case_may_declare_its_answer_format(tmp_path) -> None:
    from ratchet.verifiers.audit import CasesFileError, run_audit

    cases = tmp_path / "cases.jsonl"
    rows = [
        {"id": "gsm", "kind": "math", "gold": "14", "prediction": BOTH, "expected": True, "answer_format": "gsm8k"},
        {"id": "auto", "kind": "math", "gold": "14", "prediction": BOTH, "expected": False},
    ]
    cases.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = run_audit(cases)
    assert (report["total"], report["passed"], report["false_positives"]) == (2, 2, 0)
    cases.write_text(json.dumps({**rows[0], "answer_format": "xml"}) + "\n")
    with pytest.raises(CasesFileError, match="answer_format 'xml' is not one of"):
        run_audit(cases)
