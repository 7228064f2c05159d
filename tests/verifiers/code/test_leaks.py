"""Expected values never reach the program's process (issue 36, class 1), as root and as an ordinary user
(.ci/run runs this file in both legs).

Every attack program is wrong: it answers only what it finds in its process (a caller's frame, ``gc``,
``inspect``, a traceback, the probe's globals). When the harness hands it a whole test case (``c`` of
``for c in CASES``, a ``{'in': ..., 'out': ...}`` record) instead of the projection the test passes
(``c[0]``), it finds the expected value and passes: a verdict ``ok`` is a false positive.
"""

from __future__ import annotations

import pytest

from ratchet.verifiers.code import verify_code


def prog(body: str) -> str:
    return f"```python\n{body}\n```"


# Finds a (x, expected) pair or an {'in': x, 'out': expected} record among the objects reachable from ``objs``.
_SNOOP = """
import sys, gc, inspect
def _pick(v, x):
    if type(v) in (tuple, list) and len(v) == 2 and type(v[0]) is type(x) and v[0] == x:
        return True, v[1]
    if type(v) is dict and 'out' in v and v.get('in') == x:
        return True, v['out']
    return False, None
def _scan(objs, x, depth=4):
    seen, todo = set(), [(o, 0) for o in objs]
    while todo:
        o, d = todo.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        hit, y = _pick(o, x)
        if hit:
            return y
        if d < depth and type(o) in (list, tuple, set, frozenset):
            todo += [(e, d + 1) for e in o]
        elif d < depth and type(o) is dict:
            todo += [(e, d + 1) for e in o.values()]
    return None
def _frames(f):
    out = []
    while f is not None:
        out += list(f.f_locals.values()) + list(f.f_globals.values())
        f = f.f_back
    return out
def _tb():
    try:
        raise ValueError
    except ValueError as e:
        return e.__traceback__.tb_frame
ROUTES = {
    'frames': lambda x: _frames(sys._getframe(2)),
    'gc_objects': lambda x: gc.get_objects(),
    'gc_referrers': lambda x: gc.get_referrers(x),
    'inspect': lambda x: [v for fi in inspect.stack(0)[2:] for v in (*fi.frame.f_locals.values(), *fi.frame.f_globals.values())],
    'traceback': lambda x: _frames(_tb().f_back.f_back),
}
"""

ROUTES = ("frames", "gc_objects", "gc_referrers", "inspect", "traceback")
GOLD = "def inc(x):\n    return x + 1"
# The tests' shapes that hand a loop target or a record to the program's side.
SHAPES = {
    "tuple_cases_in_a_generator": ["CASES = [(1, 2), (5, 6), (9, 10)]", "assert all(inc(c[0]) == c[1] for c in CASES)"],
    "record_cases_in_a_generator": [
        "TESTS = [{'in': 1, 'out': 2}, {'in': 5, 'out': 6}]",
        "assert all(inc(t['in']) == t['out'] for t in TESTS)",
    ],
    "list_comprehension_against_a_list": [
        "CASES = [(1, 2), (5, 6)]",
        "assert [inc(c[0]) for c in CASES] == [c[1] for c in CASES]",
    ],
    "subscripted_table_outside_a_loop": ["CASES = [(1, 2), (5, 6)]", "assert inc(CASES[1][0]) == CASES[1][1]"],
}


def _cheat(route: str) -> str:
    return _SNOOP + f"def inc(x):\n    y = _scan(ROUTES[{route!r}](x), x)\n    return 0 if y is None else y\n"


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("route", ROUTES)
def test_the_program_never_holds_an_expected_value(shape: str, route: str) -> None:
    v = verify_code(GOLD, prog(_cheat(route)), SHAPES[shape], timeout_s=10)
    assert v.reason == "wrong", (shape, route, v)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_same_tests_pass_the_reference(shape: str) -> None:
    """The attack tables are not vacuous: the reference passes, and so does the snooping code around it."""
    assert verify_code(GOLD, prog(GOLD), SHAPES[shape], timeout_s=10).correct
    assert verify_code(GOLD, prog(_SNOOP + GOLD), SHAPES[shape], timeout_s=10).correct


# Entry points come from the gold or a declared {"entry_point": ...}, never from a name the tests bind
# (a helper's parameter, a comprehension target): a program defining that name would move the helper beside it.
HELPER = ["def check(got, want):\n    return got == want", "assert check(f(1), 2)", "assert check(f(5), 10)"]
TAKES_HELPER = (
    "import sys\nwant = 0\ndef f(x):\n    g = sys._getframe(1).f_globals\n    if 'check' in g:\n"
    "        g['check'].__code__ = (lambda a, b: True).__code__\n    return -1"
)
BINDS_TARGET = ["assert all(f(x) == y for x, y in [(1, 2), (5, 10)])"]
TAKES_TARGET = "import sys\ny = 0\ndef f(x):\n    return sys._getframe(1).f_locals.get('y', -1)"


@pytest.mark.parametrize(
    "program, tests",
    [(TAKES_HELPER, HELPER), (TAKES_TARGET, BINDS_TARGET)],
    ids=["binds_a_helpers_parameter", "binds_a_comprehension_target"],
)
def test_names_the_tests_bind_are_never_entry_points(program: str, tests: list[str]) -> None:
    gold = "def f(x):\n    return 2 * x"
    assert verify_code(gold, prog(program), tests, timeout_s=10).reason == "wrong"
    declared = verify_code(None, prog(program), [{"entry_point": "f"}, *tests], timeout_s=10)
    assert declared.reason == "wrong", declared
    assert verify_code(None, prog(gold), [{"entry_point": "f"}, *tests], timeout_s=10).correct


def test_a_task_without_gold_must_declare_its_entry_point() -> None:
    v = verify_code(None, prog(TAKES_HELPER), HELPER, timeout_s=10)
    assert v.reason == "bad_gold" and "entry_point" in v.details["error"], v


ALWAYS_EQUAL = "class A:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\ndef inc(x):\n    return A()"
NESTED = ["TABLE = [[(1, 2), (2, 3)], [(5, 6)]]", "assert all(all(inc(x) == y for x, y in row) for row in TABLE)"]


HELPER_COMPARES = ["def ok(x, want):\n    return inc(x) == want", "assert ok(1, 2)", "assert ok(5, 6)"]


@pytest.mark.parametrize("tests", [NESTED, HELPER_COMPARES], ids=["nested_comprehension", "helper_that_compares"])
def test_no_comparison_of_a_test_runs_beside_the_program(tests: list[str]) -> None:
    """A comprehension nested in an unrolled one, or a test helper calling the program, would run beside the program
    with its ``== y`` (and the case ``row``): refused (before: an always-equal object passed both)."""
    for program in (ALWAYS_EQUAL, GOLD):
        v = verify_code(GOLD, prog(program), tests, timeout_s=10)
        assert v.reason == "bad_gold" and "beside the program" in v.details["error"], v
