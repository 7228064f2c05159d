"""Multiple-choice golds (issue 38): a task record's ``choices`` travel with its gold to the verifier."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet.loop.tasks.formats import TaskDataError, math_gold
from ratchet.verifiers.math import choice_gold, verify_math
from ratchet.verifiers.math.golds import split_gold

OPTIONS = ["30", "45", "84", "90", "120"]


def test_a_record_with_choices_carries_them_to_the_verifier() -> None:
    gold = math_gold({"question": "Sum?", "answer": "C", "choices": OPTIONS}, "tasks.jsonl:1", None)
    assert split_gold(gold) == ("C", tuple(OPTIONS))
    assert verify_math(gold, "The parts add up to 84.\nThe answer is 84.").correct
    assert verify_math(gold, r"\boxed{84} so the answer is (C).").correct
    assert verify_math(gold, "The answer is C (90).").reason == "ambiguous"  # a rival pair
    assert not verify_math(gold, "The answer is 90.").correct


def test_malformed_choices_name_the_record_and_the_fix() -> None:
    with pytest.raises(TaskDataError, match=r"tasks.jsonl:3.*choices.*letter order"):
        math_gold({"question": "Sum?", "answer": "C", "choices": "A) 30 B) 45"}, "tasks.jsonl:3", None)
    with pytest.raises(TaskDataError, match="choices"):
        math_gold({"question": "Sum?", "answer": "C", "choices": [str(i) for i in range(11)]}, "tasks.jsonl:4", None)
    with pytest.raises(TaskDataError, match="not a letter"):  # MMLU's 0-based index is no letter
        math_gold({"question": "Sum?", "answer": 2, "choices": ["7", "8", "9", "10"]}, "tasks.jsonl:5", None)
    assert split_gold(math_gold({"question": "Sum?", "answer": "84", "choices": OPTIONS}, "t:6", None))[0] == "84"


def test_a_gold_without_choices_is_itself() -> None:
    assert split_gold("C") == ("C", None)
    assert split_gold('{"answer": 3}') == ('{"answer": 3}', None)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-50, 200), min_size=2, max_size=10, unique=True), st.data())
def test_another_options_value_or_letter_is_never_credited(values: list[int], data: st.DataObject) -> None:
    options = [str(v) for v in values]
    gold_i = data.draw(st.integers(0, len(options) - 1))
    other = data.draw(st.integers(0, len(options) - 1).filter(lambda i: i != gold_i))
    gold = choice_gold("ABCDEFGHIJ"[gold_i], options)
    letter, value = "ABCDEFGHIJ"[other], options[other]
    for completion in (
        f"The answer is {value}.",
        f"The answer is ({letter}).",
        f"The answer is {letter} ({options[gold_i]}).",  # another letter with the gold's value: a rival pair
        f"The answer is {'ABCDEFGHIJ'[gold_i]} ({value}).",  # the gold's letter with another option's value
        f"\\boxed{{{value}}}\n\nThe answer is ({'ABCDEFGHIJ'[gold_i]}).",
    ):
        assert not verify_math(gold, completion).correct, completion
    assert verify_math(gold, f"The answer is {options[gold_i]}.").correct
