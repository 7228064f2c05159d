"""Caches of the math verifier: cached gold parses and sympy replies never change a verdict."""

from __future__ import annotations

from ratchet.verifiers.math import verify as vm
from ratchet.verifiers.math.comparison import cas

PAIRS = [
    (r"\frac{\sqrt{3}}{2}", r"The answer is \boxed{\frac{\sqrt{3}}{2}}"),
    (r"\frac{\sqrt{3}}{2}", r"The answer is \boxed{\frac{3}{2\sqrt{3}}}"),
    (r"\frac{\sqrt{3}}{2}", r"The answer is \boxed{\frac{\sqrt{2}}{2}}"),
    (r"2\sqrt{2}", r"\boxed{\sqrt{8}}"),
    ("not a gold ((", r"\boxed{1}"),
]


def test_duplicates_and_a_tiny_cache_give_the_same_verdicts(monkeypatch):
    single = [vm.verify_math(g, c).reason for g, c in PAIRS]
    assert single == ["ok", "ok", "wrong", "ok", "bad_gold"]
    monkeypatch.setattr(cas, "SYMPY_CACHE_SIZE", 1)
    cas._sympy_replies.clear()
    batch = vm.verify_math_batch(PAIRS * 3)
    assert [v.reason for v in batch] == single * 3
    assert len(cas._sympy_replies) == 1
    assert sum(bool(v.details.get("cas")) for v in batch) >= 3  # the sympy path ran (or its cached reply)


def test_timeouts_are_not_cached(monkeypatch):
    cas._sympy_replies.clear()
    monkeypatch.setattr(cas, "_get_pool", lambda: type("P", (), {"run": lambda self, items, t: [None] * len(items)})())
    assert vm.verify_math(*PAIRS[1]).reason == "timeout"
    assert cas._sympy_replies == {}
