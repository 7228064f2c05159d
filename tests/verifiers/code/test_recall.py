"""Code verifier recall (issue 13): values Python compares fine, unittest-style tests, unclosed fences,
stdout policy; and the isolation setting (refusal in one line, the weak opt-in, audit's key)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet.verifiers.audit import audit_json, run_audit
from ratchet.verifiers.code import extract_code, sandbox, verify_code
from ratchet.verifiers.code._harness import make_codec


def prog(body: str) -> str:
    return f"```python\n{body}\n```"


# (program, tests, expected verdict): each row is what plain Python says about the assert.
VALUES = [
    ("from collections import Counter\ndef f(s):\n    return Counter(s)", ["assert f('aab') == {'a': 2, 'b': 1}"], True),
    ("from collections import Counter\ndef f(s):\n    return Counter(s)", ["assert f('aab') == {'a': 2}"], False),
    ("from collections import Counter\ndef f(s):\n    return Counter(s)", ["assert f('aab')['z'] == 0"], True),
    ("def f(xs):\n    return (x for x in xs if x % 2 == 0)", ["assert set(f([1, 2, 4])) == {2, 4}"], True),
    ("def f(xs):\n    return (x for x in xs if x % 2 == 0)", ["assert f([1, 2, 4]) == [2, 4]"], False),
    ("def f(xs):\n    return map(str, xs)", ["assert list(f([1, 2])) == ['1', '2']"], True),
    ("def f(n):\n    return range(n)", ["assert f(3) == range(0, 3)", "assert list(f(3)) == [0, 1, 2]"], True),
    ("def f(n):\n    return range(n)", ["assert f(3) == [0, 1, 2]"], False),
    (
        "from collections import defaultdict\ndef f():\n    d = defaultdict(list)\n    d['a'].append(1)\n    return d",
        ["assert f() == {'a': [1]}"],
        True,
    ),
    ("def f():\n    return {'a': 1}.keys()", ["assert f() == {'a'}"], True),
    ("import itertools\ndef f():\n    return itertools.count()", ["assert 0 in f()"], False),  # infinite: bounded, not ok
    ("from fractions import Fraction\ndef f():\n    return Fraction(1, 2)", ["assert f() == 0.5"], True),
]


@pytest.mark.parametrize("body,tests,expected", VALUES)
def test_values_compare_as_python_does(body: str, tests: list[str], expected: bool) -> None:
    v = verify_code(None, prog(body), [{"entry_point": "f"}, *tests], timeout_s=5)
    assert v.correct is expected, (tests, v.reason, v.details)


def test_codec_roundtrip_keeps_types_and_equality() -> None:
    from collections import Counter, OrderedDict, deque

    enc, dec = make_codec()
    for v in (Counter("aab"), OrderedDict(a=1), deque([1, 2], 5), range(1, 9, 2), b"x", {1: (2, 3.5)}, frozenset({1})):
        back = dec(json.loads(json.dumps(enc(v, [1000]))))
        assert type(back) is type(v) and back == v


@pytest.mark.parametrize(
    "bad",
    [["list", [["list", [["none"]]]]], ["dict", [[["list", []], ["int", "1"]]]], ["set", [["list", []]]], ["int"], "x", []],
)
def test_decoder_rejects_malformed_values(bad: object) -> None:
    _, dec = make_codec(max_depth=1)
    with pytest.raises(ValueError):
        dec(bad)


UNITTEST = ["import unittest", "tc = unittest.TestCase()"]


@pytest.mark.parametrize(
    "tests,expected",
    [
        (UNITTEST + ["tc.assertEqual(mul(2, 3), 6)", "tc.assertNotEqual(mul(2, 3), 5)", "tc.assertTrue(mul(1, 1))"], True),
        (UNITTEST + ["tc.assertEqual(mul(2, 3), 7)"], False),
        (["self.assertIn(mul(2, 3), [6, 7])", "self.assertIsNone(None)", "self.assertCountEqual([mul(1, 2), 1], [1, 2])"], True),
        (["self.assertAlmostEqual(mul(0.1, 3), 0.3)", "self.assertAlmostEqual(mul(1, 3), 3.05, delta=0.1)"], True),
        (["self.assertAlmostEqual(mul(0.1, 3), 0.31)"], False),
        (["self.assertFalse(mul(2, 0))", "self.assertGreater(mul(2, 3), 5)"], True),
    ],
)
def test_unittest_style_asserts(tests: list[str], expected: bool) -> None:
    v = verify_code(None, prog("def mul(a, b):\n    return a * b"), [{"entry_point": "mul"}, *tests], timeout_s=5)
    assert v.correct is expected, (tests, v.reason, v.details)


def test_unsupported_unittest_helper_is_bad_gold_naming_it() -> None:
    v = verify_code(None, prog("def f():\n    pass"), [{"entry_point": "f"}, "self.assertRaises(ValueError, f)"], timeout_s=5)
    assert v.reason == "bad_gold" and "assertRaises" in v.details["error"]


def test_unclosed_fence_is_the_program() -> None:
    assert extract_code("Here:\n```python\ndef inc(x):\n    return x + 1\n") == "def inc(x):\n    return x + 1\n"
    assert extract_code("```python\na = 1\n```\ntext\n```python\nb = 2") == "b = 2"
    assert extract_code("<think>```python\nx = 0\n```</think>```py\ny = 1\n```") == "y = 1\n"
    assert extract_code("<think>" * 50_000 + "x") == ""  # unclosed think hides the rest; linear time


def test_stdout_uses_the_same_hash_seed_for_reference_and_program() -> None:
    gold = "print({'alpha', 'beta', 'gamma', 'delta'})"
    program = prog("print({'delta', 'gamma', 'beta', 'alpha'})")
    assert verify_code(gold, program, [{"stdin": ""}], timeout_s=5).correct


def test_stdout_comparison_is_textual_050_is_not_05() -> None:
    """Policy (module docstring of verifiers/code/__init__.py): a printed number's format is part of the answer."""
    assert not verify_code(None, prog("print(0.5)"), ["stdin '' -> expected stdout '0.50'"], timeout_s=5).correct
    assert verify_code(None, prog("print(f'{0.5:.2f}')"), ["stdin '' -> expected stdout '0.50'"], timeout_s=5).correct


def test_kernel_isolation_missing_refuses_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "bwrap_candidates", lambda: [])
    sandbox.kernel_isolation_problem.cache_clear()
    try:
        with pytest.raises(sandbox.SandboxUnavailable) as err:
            verify_code(None, prog("def f():\n    return 1"), [{"entry_point": "f"}, "assert f() == 1"], isolation="kernel")
        msg = str(err.value)
        assert "\n" not in msg and "bwrap" in msg and "code_isolation" in msg
        weak = verify_code(
            None, prog("def f():\n    return 1"), [{"entry_point": "f"}, "assert f() == 1"], isolation="weak", timeout_s=5
        )
        assert weak.correct and weak.details["isolation"] == "weak"
    finally:
        sandbox.kernel_isolation_problem.cache_clear()


def test_audit_json_shows_isolation(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = tmp_path / "c.jsonl"
    row = {"id": "a", "kind": "code", "gold": "", "prediction": prog("def f():\n    return 1"), "expected": True}
    cases.write_text(json.dumps({**row, "tests": [{"entry_point": "f"}, "assert f() == 1"]}))
    assert json.loads(audit_json(run_audit(cases)))["isolation"] == "kernel"
    monkeypatch.setenv("RATCHET_CODE_ISOLATION", "weak")
    shown = json.loads(audit_json(run_audit(cases)))
    assert shown["isolation"] == "weak" and shown["passed"] == 1


def test_config_field_defaults_to_kernel() -> None:
    from ratchet.loop.config import VerifierConfig

    assert VerifierConfig().code_isolation == "kernel"
    with pytest.raises(ValueError):
        VerifierConfig(code_isolation="none")


TAGS = ["none", "int", "str", "dict", "set", "iter", "range", "counter", "deque", "fraction", "defaultdict", "keys", "items"]
json_values = st.recursive(
    st.one_of(st.sampled_from(TAGS), st.sampled_from([None, True, 0, -1, 2**70]), st.text(max_size=5)),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_decoder_only_ever_raises_value_error(x: object) -> None:
    """Any JSON a forged record can hold decodes to a value or raises ValueError (a sandbox_violation), never else."""
    _, dec = make_codec()
    try:
        dec(x)
    except ValueError:
        pass
