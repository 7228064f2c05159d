from math import comb

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.loop.evaluation.metrics import PromptOutcome, pass_at_k, summarize


def test_pass_at_k_hand_values():
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 4, 4) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(5, 2, 3) == pytest.approx(0.9)  # 1 - C(3,3)/C(5,3) = 1 - 1/10


@given(st.integers(1, 30).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_matches_binomial_formula(nck):
    n, c, k = nck
    assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k), abs=1e-12)


def test_pass_at_k_rejects_k_above_n():
    with pytest.raises(ValueError, match="must be in"):
        pass_at_k(2, 1, 3)


def test_summarize():
    outs = [PromptOutcome("a", True, True, 4, 2), PromptOutcome("b", False, False, 4, 0)]
    m = summarize(outs, [1, 2])
    assert m["heldout/pass@1"] == 0.5 and m["heldout/no_answer_rate"] == 0.5
    assert m["heldout/sampled_pass@1"] == pytest.approx(0.25)
    assert m["heldout/sampled_pass@2"] == pytest.approx((1 - comb(2, 2) / comb(4, 2)) / 2)
