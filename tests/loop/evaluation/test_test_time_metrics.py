"""maj@k, best-of-n and pass@k curves: hand-computed cases and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.loop.evaluation.metrics import Sample, best_of_n_correct, majority_correct, pass_at_k_curve, sampled_metrics

R, W = True, False


def s(parsed, correct, reward=None):
    return Sample(parsed, correct, (1.0 if correct else 0.0) if reward is None else reward)


def test_majority_hand_cases():
    assert majority_correct([s("7", R), s("8", W), s("7", R)]) is True
    assert majority_correct([s("8", W), s("7", R), s("8", W)]) is False
    assert majority_correct([s(None, W), s(None, W), s("7", R)]) is True  # no-answer samples abstain
    assert majority_correct([s(None, W)]) is False
    assert majority_correct([]) is False


def test_majority_tie_goes_to_the_earliest_answer():
    assert majority_correct([s("8", W), s("7", R), s("7", R), s("8", W)]) is False
    assert majority_correct([s("7", R), s("8", W), s("8", W), s("7", R)]) is True


def test_best_of_n_hand_cases():
    assert best_of_n_correct([s("8", W, 0.1), s("7", R, 1.1), s("9", W, 0.1)]) is True
    assert best_of_n_correct([s("8", W, 0.5), s("7", R, 0.5)]) is False  # tie: lowest index
    assert best_of_n_correct([]) is False


def test_metrics_by_hand():
    prompts = [
        [("7", R, 1.1), ("8", W, 0.1), ("8", W, 0.1), ("7", R, 1.1)],  # maj@2: tie -> '7' (first) right
        [("5", W, 0.1), ("5", W, 0.1), ("6", R, 1.0), (None, W, 0.0)],  # majority wrong, best-of-4 right
    ]
    m = sampled_metrics(prompts, [1, 2, 4])
    assert m["heldout/maj@1"] == 0.5 and m["heldout/maj@2"] == 0.5 and m["heldout/maj@4"] == 0.5
    assert m["heldout/best_of_n@1"] == 0.5 and m["heldout/best_of_n@2"] == 0.5 and m["heldout/best_of_n@4"] == 1.0
    # pass@1 = c/n per prompt: (2/4 + 1/4) / 2; pass@4 = 1 for both
    assert m["heldout/sampled_pass@1"] == pytest.approx(0.375) and m["heldout/sampled_pass@4"] == 1.0


def test_k_beyond_the_samples_says_how_to_fix():
    with pytest.raises(ValueError, match=r"k=3 .*fewest samples of a prompt \(2\).*eval.num_samples"):
        sampled_metrics([[("1", R, 1.0), ("2", W, 0.0)]], [1, 3])
    with pytest.raises(ValueError, match="held-out set is empty"):
        sampled_metrics([], [1])


def test_curve_matches_pass_at_k():
    assert pass_at_k_curve([(4, 1), (4, 0)], [1, 2, 4]) == pytest.approx({1: 0.125, 2: 0.25, 4: 0.5})


samples = st.lists(
    # gold is "1"; a correct sample's reward (1 + bonus) is above every wrong one's (bonus < 1)
    st.tuples(st.sampled_from(["1", "2", "3", None]), st.floats(0, 0.9)).map(
        lambda t: Sample(t[0], t[0] == "1", t[1] + (1.0 if t[0] == "1" else 0.0))
    ),
    min_size=1,
    max_size=8,
)


@given(st.lists(samples, min_size=1, max_size=5))
def test_properties(prompts):
    n = min(len(p) for p in prompts)
    m = sampled_metrics(prompts, list(range(1, n + 1)))
    for k in range(1, n + 1):
        # maj@k and best-of-k never beat pass@k's oracle "any of the first k is correct"
        any_first_k = sum(any(x.correct for x in p[:k]) for p in prompts) / len(prompts)
        assert m[f"heldout/maj@{k}"] <= any_first_k + 1e-12
        assert m[f"heldout/best_of_n@{k}"] <= any_first_k + 1e-12
        assert 0.0 <= m[f"heldout/sampled_pass@{k}"] <= 1.0
    # when the reward ranks every correct sample above every wrong one, best-of-k is exactly "any correct"
    assert m[f"heldout/best_of_n@{n}"] == pytest.approx(sum(any(x.correct for x in p[:n]) for p in prompts) / len(prompts))


@given(st.lists(st.sampled_from(["1", "2", None]), min_size=1, max_size=9))
def test_majority_is_order_free_without_ties(answers):
    xs = [s(a, a == "1") for a in answers]
    counts = {a: answers.count(a) for a in ("1", "2")}
    if counts["1"] != counts["2"]:
        assert majority_correct(xs) == majority_correct(xs[::-1]) == (counts["1"] > counts["2"])
    if sum(pass_at_k_curve([(len(xs), counts["1"])], [1]).values()) == 0:
        assert not majority_correct(xs)
