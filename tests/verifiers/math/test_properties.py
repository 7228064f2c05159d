"""Property tests: equivalent rational forms are equal, different values are not, nothing hangs."""

import time
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratchet.verifiers.math import verify_math, verify_math_batch

rationals = st.builds(Fraction, st.integers(-(10**6), 10**6), st.integers(1, 10**4))


def forms(q: Fraction) -> list[str]:
    """Equivalent ways to write q."""
    n, d = q.numerator, q.denominator
    out = [f"{n}/{d}", rf"\frac{{{n}}}{{{d}}}", rf"\frac{{{2 * n}}}{{{2 * d}}}"]
    out.append(rf"-\frac{{{-n}}}{{{d}}}" if n < 0 else rf"\frac{{{n}}}{{{d}}}")
    if d == 1:
        out.append(str(n))
    tmp = d
    for p in (2, 5):
        while tmp % p == 0:
            tmp //= p
    if tmp == 1:  # terminating decimal
        s = format(q.numerator * 10**20 // q.denominator, "d")
        neg = s.startswith("-")
        s = s.lstrip("-").rjust(21, "0")
        dec = (s[:-20] + "." + s[-20:]).rstrip("0").rstrip(".")
        out.append(("-" if neg else "") + dec)
    if q > 1 and d > 1:
        whole = q.numerator // q.denominator
        rest = q - whole
        out.append(rf"{whole}\frac{{{rest.numerator}}}{{{rest.denominator}}}")
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rationals, st.data())
def test_equivalent_forms_equal(q: Fraction, data: st.DataObject) -> None:
    fs = forms(q)
    gold = data.draw(st.sampled_from(fs))
    pred = data.draw(st.sampled_from(fs))
    wrapper = data.draw(st.sampled_from([r"\boxed{%s}", "Answer: %s", "<answer>%s</answer>"]))
    v = verify_math(gold, wrapper % pred)
    assert v.correct, (gold, pred, v)


@settings(max_examples=150, deadline=None)
@given(rationals, rationals, st.data())
def test_different_values_unequal(a: Fraction, b: Fraction, data: st.DataObject) -> None:
    if a == b:
        return
    gold = data.draw(st.sampled_from(forms(a)))
    pred = data.draw(st.sampled_from(forms(b)))
    assert not verify_math(gold, rf"\boxed{{{pred}}}").correct, (gold, pred)


HOSTILE = [
    r"\boxed{9^{9^{9}}}",
    r"\boxed{x^{x^{x^{x}}}}",
    r"\boxed{2^{99999999}}",
    r"\boxed{99999!}",
    r"\boxed{1e999999999}",
    r"\boxed{" + "(" * 300 + "1" + ")" * 300 + "}",
    r"\boxed{(x+1)^{2000} - (x-1)^{2000}}",
    r"\boxed{\frac{1}{2}" + "+x" * 400 + "}",
    r"\boxed{\sin(\sin(\sin(\sin(\sin(\sin(\sin(\sin(x))))))))-\cos(x)^{50}}",
]


@pytest.mark.parametrize("pred", HOSTILE)
def test_hostile_inputs_respect_timeout(pred: str) -> None:
    t0 = time.perf_counter()
    v = verify_math("2", pred, timeout_s=1.0)
    assert time.perf_counter() - t0 < 1.0 + 1.5  # timeout plus margin (worker restart excluded)
    assert not v.correct


def test_batch_survives_a_killed_worker() -> None:
    pairs = [("2", r"\boxed{(x+1)^{3000}-(x-1)^{3000}}"), ("\\sqrt{2}", r"\boxed{\frac{2}{\sqrt{2}}}"), ("1", r"\boxed{1}")]
    vs = verify_math_batch(pairs, timeout_s=1.0)
    assert [v.correct for v in vs] == [False, True, True]
