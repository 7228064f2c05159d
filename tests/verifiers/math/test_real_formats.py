"""Recall classes of math-1.4.0 (issue 25: the formats real models write): golden rows per policy and properties.

Each row is (gold, completion, expected); the policy each class checks is written in the policy docstring of
``verifiers/math.py`` (and the module that enforces it). Wrong rows sit next to the right ones: a recall fix must
not credit a wrong answer, and every false-positive guard of earlier versions still holds.
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet.verifiers.math import ANSWER_FORMATS, VERSION, extract_answer, verify_math, verify_math_batch

A_LINES = [  # 1. the Q:/A: few-shot format (math_extract._answer_lines)
    ("14", "Two boxes have 2 * 7 = 14 pens.\nA: 14", True),
    ("14", "Two boxes have 2 * 7 = 15 pens.\nA: 15", False),
    ("9", "She has 12 - 3 = 9 apples left.\nA: 9\n\nQ: Tom has 4 cars. He buys 3.\nA: 7", True),  # invented next Q
    ("7", "She has 12 - 3 = 9 apples left.\nA: 9\n\nQ: Tom has 4 cars. He buys 3.\nA: 7", False),
    ("12", "Which is right?\nA: 12\nB: 14\nC: 16", False),  # an option list, not an answer
    ("9", "The answer is 9.\n\nProblem:\nFind f(3).\nSolution:\nThe answer is 16", True),  # TheoremQA continuation
    ("16", "The answer is 9.\n\nProblem:\nFind f(3).\nSolution:\nThe answer is 16", False),
    ("9", "Question: how many are left?\nWe take 3 from 12, so the answer is 9.", True),  # a restated question first
    ("5", "The answer is 5.\nQ: Is that right?\nWait, no: the answer is 6.", False),  # a self-question that retracts
    ("5", "A: Let's think step by step.\nShe has 2 + 3 = 5 apples.\nThe answer is 5.", True),  # an opening, not an answer
]
JSON_FIELDS = [  # 2. structured output (math_extract._from_json)
    ("36", '```json\n{"reasoning": "6*6 = 36", "answer": "36"}\n```', True),
    (r"\frac{3}{4}", '{"reasoning": "3 of 4 parts", "answer": "3/4"}', True),
    ("36", '{"answer": 36}', True),
    ("36", '{"answer": "\\\\boxed{36}"}', True),  # JSON-escaped LaTeX inside the field
    ("36", '{"answer": 12}', False),
    ("36", '{"answer": "36"}\n{"answer": "12"}', False),  # two different fields: ambiguous
    ("36", '{"answer": "36"} but then \\boxed{12}', False),  # a disagreeing box outside the field
    ("36", '{"answer": "36"}\nWait, that is wrong: it is 12.', False),  # a retraction after it
]
UNMARKED = [  # 3. prose conclusions with no marker (math_prose._final_sentence)
    ("45", "The tank holds 5 * 9 = 45 liters when full.\nThe tank holds 45 liters.", True),
    ("120", "So the farmer sells 120 eggs in total. This is the number of eggs sold each week.", True),
    ("8", "$2^3 = 2 \\cdot 2 \\cdot 2 = 8$", True),
    ("70", "Convert back: b = 21 or b = 49.\n\nSum of all such bases: 21 + 49 = 70.", True),
    ("62", "The values are a = 3, b = 57, c = 2.\nTherefore\n\n a + b + c = 3 + 57 + 2 = 62.", True),
    ("3", "She buys 3 apples.", False),  # a number of the question, not a computed value
    ("45", "The tank holds 5 * 9 = 45 liters when full.\nThe tank holds 46 liters.", False),
    ("45", "The tank holds 5 * 9 = 45 liters.\nThe tank holds not 45 liters.", False),
    ("62", "Let a + b + c = 3 + 57 + 2 = 62.", False),  # a setup, not a conclusion
    ("62", "a + b + c = 3 + 57 + 2 = 62.", False),  # no conclusion word: an intermediate step
    ("120", "So the farmer sells 120 eggs in total. But wait, that is not right.", False),
]
SENTENCES_IN_MARKERS = [  # 4. a sentence inside an answer line or tag is read for its value (math_prose)
    ("6", "Answer: If they share the stickers equally, each friend gets 6.", True),
    ("490", "<think>7 crates of 70</think> <answer> 7 * 70 = 490 oranges. </answer>", True),
    ("6", "<answer>Each friend gets 6 stickers.</answer>", True),
    ("6", "Answer: 6 stickers each, and 18 in total.", False),  # two values
    ("6", "Answer: 6 if n is odd", False),  # a condition after the value qualifies it
    ("6", "<answer>If n is odd, each gets 6.</answer>", False),  # one case of a case split
    ("6", "Answer: If they do not share, each gets 6.", False),
]
ORDINALS = [  # 5. math_normalize._ORDINAL
    ("7", r"She finishes in $\boxed{7^{\text{th}} \text{ place}}$.", True),
    ("21", r"\boxed{21st}", True),
    ("7", r"\boxed{8^{\text{th}} \text{ place}}", False),
    ("5000", r"\boxed{5 thousand}", True),  # "th" of a word is no suffix
]
FUNCTION_LABELS = [  # 6. math_compare._LABEL
    ("4", "Then $g(g(3)) = g(5) = 4$.", True),
    ("4", r"\boxed{f^{-1}(3) = 4}", True),
    ("5", "Then $g(g(3)) = g(5) = 4$.", False),  # an earlier link is never the answer
    ("5", r"\boxed{g(x) + 1 = 5}", False),  # an equation, not a label
]
CHECKS_AFTER = [  # 7. math_tail: confirmations are no retraction, affirmations no rival answer
    ("21", "The answer is $\\boxed{21}$. However, to be sure, let us check: 3 * 7 = 21, which confirms the answer.", True),
    ("5", "The answer is 5.\nThis answer is correct.\nThis answer is correct.", True),
    ("21", "The answer is $\\boxed{21}$. Wait, that is wrong: 3 * 8 = 24, so the answer is 24.", False),
    ("21", "The answer is $\\boxed{21}$. However, to be sure, let us check: 3 * 7 = 22, which is not 21.", False),
    ("21", "The answer is $\\boxed{21}$. However, n = 0 also works.", False),  # a real contrast
    ("5", "The answer is 5.\nThis answer is wrong.", False),
]
SAME_VALUE_TWICE = [  # 8. math_extract._value_key
    ("2", r"So $\boxed{m = 2}$, that is, $m$ equals $\boxed{2}$.", True),
    ("2", r"So $\boxed{m = 2}$, that is, $m$ equals $\boxed{3}$.", False),
    ("2", r"\boxed{x + y = 2} and \boxed{2}", False),  # an equation states no value
]
TRUTH_VALUES = [  # 9. math_compare._TRUTH
    ("True", "Every such number is even, so the statement holds. The answer is Yes.", True),
    ("True", "The answer is No.", False),
    ("False", r"\boxed{no}", True),
    ("Yes", r"\boxed{True}", True),
    ("False", r"\boxed{True}", False),
]
TABLES = {
    "a_lines": A_LINES,
    "json_fields": JSON_FIELDS,
    "unmarked": UNMARKED,
    "sentences_in_markers": SENTENCES_IN_MARKERS,
    "ordinals": ORDINALS,
    "function_labels": FUNCTION_LABELS,
    "checks_after": CHECKS_AFTER,
    "same_value_twice": SAME_VALUE_TWICE,
    "truth_values": TRUTH_VALUES,
}


@pytest.mark.parametrize("theme", sorted(TABLES))
def test_golden_table(theme: str) -> None:
    rows = TABLES[theme]
    verdicts = verify_math_batch([(g, c) for g, c, _ in rows])
    bad = [(g, c, e, v.reason) for (g, c, e), v in zip(rows, verdicts) if v.correct != e]
    assert not bad, bad


def test_version_bumped() -> None:
    assert VERSION == "math-1.4.0"


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
