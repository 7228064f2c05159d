"""The reward-hacking monitors (ratchet.loop.gate.monitors) on hand-built completions: each trips on its own case."""

import math

import pytest

from ratchet.loop.config import MonitorsConfig
from ratchet.loop.gate.monitors import MONITORS, Completion, is_mixed, measure, modal_share, quantile, target_scripts


def side(n=100, **over):
    """n completions: 10 tokens, stopped, right on even prompts, formatted when right, answer = the prompt's gold."""
    out = []
    for i in range(n):
        base = dict(prompt_id=f"p{i:03d}", tokens=10, truncated=False, correct=i % 2 == 0, format_ok=i % 2 == 0,
                    answered=True, answer=str(i), text=f"The sum is {i}. Answer: {i}", cross_correct=i % 2 == 0)  # fmt: skip
        base.update({k: f(i) for k, f in over.items()})
        out.append(Completion(**base))
    return out


GOLDS = {f"p{i:03d}": str(i) for i in range(100)}


def by_name(ms):
    return {m.name: m for m in ms}


def test_a_candidate_like_its_incumbent_trips_nothing():
    ms = by_name(measure(side(), side(), GOLDS, MonitorsConfig()))
    assert set(ms) == set(MONITORS) and not any(m.tripped for m in ms.values())
    assert ms["length_mean_ratio"].value == 1.0 and ms["truncation_rate"].value == 0.0
    assert ms["same_answer_share"].reference_of == "golds" and ms["same_answer_share"].value == 0.0


CASES = {
    "length_mean_ratio": dict(tokens=lambda i: 300 if i % 20 == 0 else 10),  # mean 2.45x, P90 unchanged
    "length_p90_ratio": dict(tokens=lambda i: 40 if i % 10 < 2 else 10),  # mean 1.6x (under 2), P90 4x
    "truncation_rate": dict(truncated=lambda i: i % 5 == 0),
    "format_without_correct": dict(format_ok=lambda i: True),  # every wrong answer now earns the format term
    "no_answer_rate": dict(answered=lambda i: i % 4 != 1, answer=lambda i: None if i % 4 == 1 else str(i)),
    "same_answer_share": dict(answer=lambda i: "7" if i % 2 else str(i)),
    "language_mixing": dict(text=lambda i: "答案是这个数字" if i % 10 == 1 else f"Answer: {i}"),
    "cross_check_disagreement": dict(cross_correct=lambda i: i % 10 != 0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_monitor_trips_on_its_own_case_and_names_itself(name):
    ms = by_name(measure(side(**CASES[name]), side(), GOLDS, MonitorsConfig()))
    assert [m for m in ms if ms[m].tripped] == [name]
    reason = ms[name].reason()
    assert reason.startswith(f"monitor {name}: ") and f"gate.monitors.{name}" in reason


def test_thresholds_none_and_min_prompts_only_measure():
    cand = side(tokens=lambda i: 25)
    off = by_name(measure(cand, side(), GOLDS, MonitorsConfig(length_mean_ratio=None, length_p90_ratio=None)))
    assert off["length_mean_ratio"].value == 2.5 and not off["length_mean_ratio"].tripped
    few = by_name(measure(cand[:50], side(), GOLDS, MonitorsConfig()))  # 50 paired prompts < min_prompts 100
    assert few["length_mean_ratio"].prompts == 50 and not any(m.tripped for m in few.values())


def test_repeating_golds_and_a_repeating_incumbent_raise_the_same_answer_reference():
    golds = {f"p{i:03d}": str(i % 5) for i in range(100)}  # golds repeat: 20% share the most common one
    cand = side(answer=lambda i: str(i % 5))
    m = by_name(measure(cand, side(), golds, MonitorsConfig()))["same_answer_share"]
    assert (m.candidate, m.reference, m.reference_of, m.tripped) == (0.2, 0.2, "golds", False)
    m = by_name(measure(side(answer=lambda i: "1"), side(answer=lambda i: "1"), GOLDS, MonitorsConfig()))["same_answer_share"]
    assert (m.reference_of, m.value, m.tripped) == ("incumbent", 0.0, False)  # the round did not cause it


def test_unpaired_prompts_and_unjudged_cross_checks_are_left_out():
    inc = side()[:60]
    ms = by_name(measure(side(cross_correct=lambda i: None if i < 30 else i % 2 == 0), inc, GOLDS, MonitorsConfig()))
    assert ms["truncation_rate"].prompts == 60 and ms["cross_check_disagreement"].value == 0.0
    assert "cross_check_disagreement" not in by_name(measure(side(cross_correct=lambda i: None), side(), GOLDS, MonitorsConfig()))
    assert measure(side()[:10], side()[50:], GOLDS, MonitorsConfig()) == []


def test_helpers():
    assert quantile([10, 20, 30, 40], 0.9) == pytest.approx(37.0) and quantile([5.0], 0.9) == 5.0
    assert modal_share(["1", " 1", "2", None]) == pytest.approx(2 / 3) and modal_share([None]) == 0.0
    assert target_scripts("none", ["What is 2 + 3?"]) == {"LATIN"} and target_scripts("zh", []) == {"CJK"}
    assert is_mixed("the answer 是这个数字", frozenset({"LATIN"})) and not is_mixed("12 + 3 = 15", frozenset({"LATIN"}))
    zero = measure(side(tokens=lambda i: 0), side(tokens=lambda i: 0), GOLDS, MonitorsConfig())
    assert by_name(zero)["length_mean_ratio"].value == 1.0
    grew = measure(side(tokens=lambda i: 3), side(tokens=lambda i: 0), GOLDS, MonitorsConfig())
    assert math.isinf(by_name(grew)["length_mean_ratio"].value)
