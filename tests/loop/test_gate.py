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


def test_per_prompt_means_by_hand_and_too_few_samples():
    from ratchet.loop.gate import per_prompt_means

    assert per_prompt_means([(4, 1), (4, 4), (5, 0)], 4) == [0.25, 1.0, 0.0]
    with pytest.raises(ValueError, match="eval.num_samples >= 4"):
        per_prompt_means([(4, 1), (2, 2)], 4)


def test_gate_on_paired_means_with_bootstrap():
    cfg = GateConfig(tolerance=0.05, test="bootstrap", samples_per_prompt=4, max_consecutive_rejections=3)
    kw = {**KW, "cfg": cfg}
    # Every prompt drops by 1/4: all resampled mean differences are -0.25 < 0 -> p = 0, delta = -0.25.
    r = decide([0.0, 0.5, 0.25, 0.75], [0.25, 0.75, 0.5, 1.0], best_promoted_pass1=0.0, **kw)
    assert r.decision == "reject" and r.p_value == 0.0 and r.delta == pytest.approx(-0.25)
    # Identical means: no difference at all -> p = 1, promoted (pass@1 estimate 0.5 each).
    r = decide([0.25, 0.75], [0.25, 0.75], best_promoted_pass1=0.5, **kw)
    assert r.decision == "promote" and r.p_value == 1.0 and r.candidate_pass1 == pytest.approx(0.5)


def test_mcnemar_refuses_means_and_config_names_the_fix():
    with pytest.raises(ValueError, match="bootstrap"):
        decide([0.5, 1.0], [1.0, 1.0], best_promoted_pass1=0.5, **KW)
    with pytest.raises(ValueError, match="gate.test = 'bootstrap'"):
        GateConfig(samples_per_prompt=4)
    with pytest.raises(ValueError, match="samples_per_prompt = 1"):
        GateConfig(samples_per_prompt=1, test="bootstrap")


def test_mde_and_warning_use_k_samples():
    from ratchet.loop.gate import minimum_detectable_effect, power_warning

    # var = 0.3 * (1 + 1/4) / 2 = 0.1875; sqrt(0.1875 / 48) = 0.0625; * 2.4865 = 0.1554
    assert minimum_detectable_effect(48, 0.05, samples_per_prompt=4) == pytest.approx(0.1554, abs=1e-3)
    msg = power_warning(48, 0.05, samples_per_prompt=4)
    assert "4 samples each" in msg and "0.155" in msg
    # 2.4865^2 * 0.1875 / 0.05^2 = 463.7 -> 464 prompts suffice with k = 4
    assert power_warning(464, 0.05, samples_per_prompt=4) is None and power_warning(464, 0.05) is not None
