"""HumanEval's ``check(candidate)`` run natively: check in a trusted process, each call a probe of the program."""

from __future__ import annotations

from ratchet.verifiers.code import verify_code

LOOP = """
import random

def check(candidate):
    for _ in range(30):
        x, y = random.randint(0, 1000), random.randint(0, 1000)
        assert candidate(x, y) == x + y, "sum"
    assert candidate(1, y=2) == 3
"""
TESTS = [{"check": LOOP, "entry_point": "add"}]


def test_unseeded_random_loop_passes_a_right_program_and_fails_wrong_ones():
    v = verify_code(None, "def add(x, y):\n    return x + y\n", TESTS)
    assert v.reason == "ok" and v.details["calls"] == 31
    assert verify_code(None, "def add(x, y):\n    return None\n", TESTS).reason == "wrong"
    assert verify_code(None, "def add(x, y):\n    return x + y if x < 500 else 0\n", TESTS).reason == "wrong"
    assert verify_code(None, "def add(x, y):\n    raise ValueError(x)\n", TESTS).reason == "runtime_error"


def test_expected_values_never_reach_the_programs_process():
    secret = """
def check(candidate):
    want = "expected-" + "value-7731"
    assert candidate("q") == want
"""
    program = (
        "import gc, inspect\n"
        "def add(s):\n"
        "    for o in gc.get_objects() + [f.frame.f_locals for f in inspect.stack()]:\n"
        "        if isinstance(o, str) and o.startswith('expected-'):\n"
        "            return o\n"
        "        if isinstance(o, dict):\n"
        "            for v in o.values():\n"
        "                if isinstance(v, str) and v.startswith('expected-'):\n"
        "                    return v\n"
        "    return 'none'\n"
    )
    assert verify_code(None, program, [{"check": secret, "entry_point": "add"}]).reason == "wrong"


def test_a_program_that_exits_before_answering_does_not_pass():
    v = verify_code(None, "import sys\nsys.exit(0)\ndef add(x, y):\n    return x + y\n", TESTS)
    assert not v.correct


def test_calls_chained_on_results_beyond_the_round_limit_are_bad_gold():
    chained = "def check(candidate):\n    x = 0\n    for _ in range(10):\n        x = candidate(x, 1)\n    assert x == 10\n"
    v = verify_code(None, "def add(x, y):\n    return x + y\n", [{"check": chained, "entry_point": "add"}])
    assert v.reason == "bad_gold" and "rounds" in v.details["error"]


def test_malformed_check_tests_are_refused_in_one_line():
    v = verify_code(None, "def add(x, y):\n    return x + y\n", [{"check": "def other(c):\n    pass\n", "entry_point": "add"}])
    assert v.reason == "bad_gold" and "check(candidate)" in v.details["error"]
    v = verify_code(None, "def add(x, y):\n    return x + y\n", [*TESTS, "assert add(1, 2) == 3"])
    assert v.reason == "bad_gold" and "only test" in v.details["error"]


HUGE = "def check(candidate):\n    for x in range(400000000):\n        assert candidate(x) == x + 1\n"
INC = "def inc(x):\n    return x + 1"


def test_a_huge_literal_range_is_never_listed() -> None:
    """``range(400000000)`` in a test (issue 36, class 6): refused in one line, never a list (before: a MemoryError
    traceback at 3.4 GB while converting the HumanEval test; the assert form died on the sandbox's memory limit)."""
    from ratchet.loop.tasks.formats import humaneval_tests

    tests = humaneval_tests(HUGE, "inc", "HumanEval/x", "def inc(x):\n    pass\n")  # kept as one check(): no list
    v = verify_code(INC, f"```python\n{INC}\n```", list(tests), timeout_s=10)
    assert v.reason == "bad_gold" and "more than 20000 times" in v.details["error"], v
    unrolled = ["assert all(inc(x) == x + 1 for x in range(400000000))"]
    v = verify_code(INC, f"```python\n{INC}\n```", unrolled, timeout_s=10)
    assert v.reason == "bad_gold" and "at most 1,000,000 test cases" in v.details["error"], v


def test_a_humaneval_task_without_a_reference_declares_its_entry_point(tmp_path) -> None:
    """The code verifier takes entry points only from a gold or a declaration (issue 36): a HumanEval record without
    ``canonical_solution`` still verifies, its converted asserts carrying ``{"entry_point": ...}``."""
    import json

    from ratchet.loop.config.tasks import RecordFields
    from ratchet.loop.tasks.formats import load_records

    rec = {
        "task_id": "T/0",
        "prompt": "def inc(x):\n    pass\n",
        "test": "def check(c):\n    assert c(1) == 2\n",
        "entry_point": "inc",
    }
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps(rec) + "\n")
    _, (r,) = load_records(RecordFields(path=str(f)), "t")
    assert r.solution is None and {"entry_point": "inc"} in r.tests
    assert verify_code(None, f"```python\n{INC}\n```", list(r.tests), timeout_s=10).correct
    assert verify_code(None, "```python\ndef inc(x):\n    return x\n```", list(r.tests), timeout_s=10).reason == "wrong"
