"""Extraction and format checks run in linear time: any completion up to 1 MB is read in < 1 s.

Issue 11 item 4: 1,000 newlines took 11.8 s (a cubic answer-line regex), 4,000 unclosed ``\\boxed{``
took 14 s, unclosed ``<answer>``/``<think>`` runs were quadratic. The bound is this process's CPU time
(``time.process_time``) around one call, so other jobs on a shared machine do not count against it (at load 13 on
2 cores the wall time of one 1 MB case reached 2.2 s while its CPU time stayed ~0.3 s); it is generous.
"""

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratchet.verifiers.format import TEMPLATES, check_format
from ratchet.verifiers.math.extraction.extract import MAX_BOXES, extract_answer, find_boxes

BOUND_S = 5.0  # CPU seconds: a guard against super-linear parsing (a quadratic takes minutes on 1 MB), not a speed target
# (~0.3 s idle, 1.5 s seen at load 4; speed is measured by benchmarks/)
MB = 1_000_000

# pieces a hostile completion repeats: every known super-linear trigger of the old extractor
PIECES = [
    "\n",
    "\\boxed{",
    "\\boxed {",
    "{",
    "}",
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "< ",
    " ",
    "Answer:",
    "Answer: 5\n",
    "the answer is ",
    "$",
    "\\(",
    ".",
    "**Final answer:** ",
    "\\boxed{1}",
    "\\frac{",
    "答案是",
    '{"answer": "',  # math-1.4.0 markers: JSON answer fields, A: lines, invented next questions, closing chains
    '"answer": 5, ',
    "\nA: 5",
    "\nQ: ",
    "\nProblem:",
    "Therefore a + b = 1 + 2 = 3.",
    "However, to be sure, let us check: ",
    "If they share equally, ",
    "\n-----\nAnswer\n-----\n",
]


def _timed(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    t0 = time.process_time()
    out = fn(*args, **kwargs)
    return out, time.process_time() - t0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=3), st.integers(10_000, MB), st.text(max_size=20))
def test_extraction_of_hostile_megabyte_is_fast(pieces: list[str], size: int, tail: str) -> None:
    unit = "".join(pieces)
    text = unit * max(1, size // len(unit)) + tail
    assert len(text) <= MB + 20 + len(unit)
    ex, took = _timed(extract_answer, text)
    assert took < BOUND_S, (pieces, len(text), took)
    assert ex.status in ("ok", "no_answer", "ambiguous")


def test_named_hostile_cases_are_fast() -> None:
    cases = {
        "10^5 newlines": "\n" * 100_000 + "Answer: 5",
        "1 MB of newlines": "\n" * MB,
        "unclosed boxes": "\\boxed{" * (MB // 7),
        "unclosed think": "<think>" * (MB // 7),
        "unclosed answer": "<answer>" * (MB // 8),
        "a tag's open bracket then spaces": "<" + " " * MB,
        "distinct boxes": "".join(f"\\boxed{{{i}}}" for i in range(MB // 12)),
        "one unclosed brace run": "\\boxed{" + "{" * MB,
        "closing answer tags on one line": "</answer>" * (MB // 9),
        "answer words on one line": "the answer is " * (MB // 14),
        "answer lines": "Answer: 5\n" * (MB // 10),
        "boxes of dollar runs": ("\\boxed{" + "$" * 3900 + "}") * 250,
        "boxes of unclosed spans": ("\\boxed{a " + "\\(" * 1900 + "}") * 250,
    }
    for name, text in cases.items():
        _, took = _timed(extract_answer, text)
        assert took < BOUND_S, (name, took)
        for template in TEMPLATES:
            _, took = _timed(check_format, text, template)
            assert took < BOUND_S, (name, template, took)


def test_many_boxes_are_a_hedge_not_an_answer() -> None:
    ex = extract_answer("\\boxed{5}" * (MAX_BOXES + 1))
    assert ex.status == "ambiguous" and "more than" in ex.problem
    assert extract_answer("\\boxed{5}" * MAX_BOXES).text == "5"


def test_find_boxes_spans() -> None:
    boxes = find_boxes(r"a \boxed{1} b \boxed {x^{2}} c \boxed 7 d \boxed{ e \boxed word")
    assert [b.content for b in boxes] == ["1", "x^{2}", "7", None]
