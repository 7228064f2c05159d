"""``verifiers.math_arith.exact_value``: arithmetic on numbers computed exactly, anything else left to sympy."""

import math
import time
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet.verifiers.math import verify_math_batch
from ratchet.verifiers.math.parsing.arith import exact_value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2^{10}", 1024),
        ("5!", 120),
        (r"\binom{9}{2}", 36),
        (r"\frac{1}{3} + 1/4", Fraction(7, 12)),
        (r"\frac12+\frac1{72}", Fraction(37, 72)),
        ("(-2)^3", -8),
        (r"1.5\times 10^{3}", 1500),
        ("2^{-2}", Fraction(1, 4)),
        (r"\left(1+2\right)\cdot3", 9),
        (r"3 \div 4 - 1", Fraction(-1, 4)),
    ],
)
def test_hand_computed_values(text: str, value: Fraction) -> None:
    assert exact_value(text) == value


@pytest.mark.parametrize(
    "text",
    ["2^10", "2(3)", r"\pi", r"\sqrt{4}", "x+1", r"\frac34i", "1/0", "0^{0}", "2^{1/2}", "9^{9999}", "801!", r"\frac{123}"],
)
def test_refuses_all_but_plain_arithmetic(text: str) -> None:
    """``2^10`` is 2^1 then 0 in LaTeX; roots, names, constants and huge values are sympy's (and its guards')."""
    assert exact_value(text) is None


ints = st.integers(min_value=-30, max_value=30)


@settings(max_examples=80, deadline=None)
@given(ints, ints, ints.filter(bool), st.integers(min_value=1, max_value=6))
def test_matches_fraction_arithmetic(a: int, b: int, c: int, e: int) -> None:
    """``a/c + b^e * 2 - |a|!`` equals the same arithmetic done on ``Fraction`` (``0^0`` is refused, so e >= 1)."""
    text = rf"\frac{{{a}}}{{{c}}} + ({b})^{{{e}}} \cdot 2 - {abs(a)}!"
    assert exact_value(text) == Fraction(a, c) + Fraction(b) ** e * 2 - math.factorial(abs(a))


@settings(max_examples=40, deadline=None)
@given(ints, ints)
def test_verifier_credits_the_computed_value_only(a: int, b: int) -> None:
    v = verify_math_batch([(str(a * b), rf"\boxed{{({a}) \times ({b})}}"), (str(a * b + 1), rf"\boxed{{({a}) \times ({b})}}")])
    assert v[0].correct and not v[1].correct


def test_hostile_arithmetic_is_refused_fast() -> None:
    t0 = time.perf_counter()
    assert exact_value("(" * 5000 + "1" + ")" * 5000) is None  # deeper than MAX_DEPTH / MAX_TOKENS
    assert exact_value("+".join(["9^{999}"] * 60)) is None  # more tokens than MAX_TOKENS
    assert time.perf_counter() - t0 < 1.0
