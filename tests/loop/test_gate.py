import pytest

from ratchet.loop.config import GateConfig
from ratchet.loop.gate import bootstrap_worse_p, decide, mcnemar_worse_p

T, F = True, False


def test_mcnemar_hand_values():
    # b=3 (only incumbent right), c=0: P(X>=3 | n=3) = 1/8
    assert mcnemar_worse_p([F, F, F, T], [T, T, T, T]) == pytest.approx(1 / 8)
    assert mcnemar_worse_p([T, T], [T, T]) == 1.0
    # b=1, c=2: P(X>=1 | n=3) = 7/8
    assert mcnemar_worse_p([F, T, T], [T, F, F]) == pytest.approx(7 / 8)


def test_bootstrap_says_worse_only_for_a_clear_drop():
    assert bootstrap_worse_p([F] * 20 + [T] * 10, [T] * 30) < 0.01
    assert bootstrap_worse_p([T] * 30, [F] * 20 + [T] * 10) > 0.99


KW = dict(cfg=GateConfig(tolerance=0.05, max_consecutive_rejections=2), consecutive_rejections=0, candidate_no_answer_rate=0.0)


def test_promote_when_better():
    r = decide([T, T, T, F], [T, F, F, F], best_promoted_pass1=0.25, **KW)
    assert r.decision == "promote" and r.delta == pytest.approx(0.5)


def test_reject_when_worse_than_incumbent_beyond_tolerance():
    r = decide([T, F, F, F], [T, T, F, F], best_promoted_pass1=0.5, **KW)
    assert r.decision == "reject" and "incumbent" in r.reason


def test_best_promoted_stops_accumulated_small_losses():
    # Candidate is within tolerance of the incumbent but not of the best score ever promoted.
    cand, inc = [T] * 14 + [F] * 6, [T] * 15 + [F] * 5
    r = decide(cand, inc, best_promoted_pass1=0.80, **KW)
    assert r.decision == "reject" and "best promoted" in r.reason


def test_halt_after_consecutive_rejections_and_on_format_collapse():
    kw = {**KW, "consecutive_rejections": 1}
    assert decide([F, F], [T, T], best_promoted_pass1=1.0, **kw).decision == "halt"
    collapse = {**KW, "candidate_no_answer_rate": 0.9}
    assert decide([T, T], [T, T], best_promoted_pass1=1.0, **collapse).decision == "halt"


def test_unpaired_outcomes_rejected():
    with pytest.raises(ValueError, match="paired"):
        decide([T], [T, F], best_promoted_pass1=0.5, **KW)


def test_minimum_detectable_effect_by_hand():
    from ratchet.loop.gate import minimum_detectable_effect, power_warning, prompts_needed

    # z_0.95 + z_0.8 = 1.6449 + 0.8416 = 2.4865; sqrt(0.3 / 48) = 0.0791 -> 0.1966
    assert minimum_detectable_effect(48, 0.05) == pytest.approx(0.1966, abs=1e-3)
    assert prompts_needed(0.05, 0.05) == 742  # 2.4865^2 * 0.3 / 0.05^2 = 741.96
    assert minimum_detectable_effect(742, 0.05) <= 0.05 < minimum_detectable_effect(741, 0.05) + 1e-4
    assert minimum_detectable_effect(48, 0.05, samples_per_prompt=4) < minimum_detectable_effect(48, 0.05)
    msg = power_warning(48, 0.05)
    assert "48 prompts" in msg and "~742 held-out prompts" in msg and "\n" not in msg
    assert power_warning(1000, 0.05) is None
