import math

import numpy as np
import pytest

from ratchet.loop.config import GateConfig, load_config
from ratchet.loop.gate import (
    bootstrap_lower_bound,
    bootstrap_worse_p,
    decide,
    mcnemar_worse_p,
    tango_lower_bound,
    tango_z,
)

T, F = True, False
Z95 = 1.6448536269514722


def test_mcnemar_hand_values():
    # b=3 (only incumbent right), c=0: P(X>=3 | n=3) = 1/8
    assert mcnemar_worse_p([F, F, F, T], [T, T, T, T]) == pytest.approx(1 / 8)
    assert mcnemar_worse_p([T, T], [T, T]) == 1.0
    # b=1, c=2: P(X>=1 | n=3) = 7/8
    assert mcnemar_worse_p([F, T, T], [T, F, F]) == pytest.approx(7 / 8)


def test_bootstrap_says_worse_only_for_a_clear_drop():
    assert bootstrap_worse_p([F] * 20 + [T] * 10, [T] * 30) < 0.01
    assert bootstrap_worse_p([T] * 30, [F] * 20 + [T] * 10) > 0.99


# --- Tango's score bound -----------------------------------------------------------------------------


def test_tango_z_is_mcnemar_at_zero_and_zero_at_the_estimate():
    # delta0 = 0: (b - c) / sqrt(b + c)
    assert tango_z(7, 3, 50, 0.0) == pytest.approx(4 / math.sqrt(10))
    # delta0 = the estimate (b - c) / n: the numerator vanishes
    assert tango_z(7, 3, 50, 4 / 50) == pytest.approx(0.0, abs=1e-12)


def test_tango_bound_without_discordant_pairs_by_hand():
    # b = c = 0: q = -delta0, Z = sqrt(n (-delta0) / (1 + delta0)) = z  ->  delta0 = -z^2 / (n + z^2)
    for n in (10, 48, 1000):
        assert tango_lower_bound(0, 0, n, 0.05) == pytest.approx(-(Z95**2) / (n + Z95**2), abs=1e-9)


def test_tango_bound_solves_the_score_equation_and_is_monotone():
    lb = tango_lower_bound(12, 5, 100, 0.05)
    assert tango_z(12, 5, 100, lb) == pytest.approx(Z95, abs=1e-6)
    assert lb < 7 / 100
    # more evidence (same estimate, 10x the prompts) -> a tighter bound; a larger alpha -> a higher bound
    assert lb < tango_lower_bound(120, 50, 1000, 0.05) < 0.07
    assert tango_lower_bound(12, 5, 100, 0.2) > lb
    with pytest.raises(ValueError, match="b \\+ c <= n"):
        tango_lower_bound(60, 50, 100, 0.05)


def test_tango_bound_covers_the_true_change_at_its_level():
    # The bound must be below the true delta in >= ~95% of samples (paired cells: D = 0.2, delta = -0.03).
    rng = np.random.default_rng(3)
    n, d, delta = 200, 0.2, -0.03
    cells = rng.multinomial(n, [(d + delta) / 2, (d - delta) / 2, 1 - d], size=2000)  # (2000, 3): b, c, concordant
    covered = np.mean([tango_lower_bound(int(b), int(c), n, 0.05) <= delta for b, c, _ in cells])
    assert 0.93 <= covered <= 0.975


def test_bca_bound_of_means_by_hand_and_coverage():
    assert bootstrap_lower_bound([0.25] * 10, 0.05) == 0.25  # no spread: the mean itself
    rng = np.random.default_rng(5)
    hits = [bootstrap_lower_bound(rng.normal(0.1, 0.3, 150), 0.05, samples=1000, seed=i) <= 0.1 for i in range(300)]
    assert 0.9 <= np.mean(hits) <= 0.99


# --- the non-inferiority rule ------------------------------------------------------------------------

KW = dict(cfg=GateConfig(), consecutive_rejections=0, candidate_no_answer_rate=0.0)


def test_default_gate_is_noninferiority_with_a_stated_margin():
    g = GateConfig()
    assert (g.rule, g.margin, g.test, g.alpha) == ("noninferiority", 0.03, "score", 0.05)


def test_promote_only_on_evidence():
    inc = [T] * 50 + [F] * 50
    # clearly better: 20 prompts gained, none lost
    better = [T] * 70 + [F] * 30
    r = decide(better, inc, best_promoted_pass1=0.5, **KW)
    assert r.decision == "promote" and r.lower_bound > 0 and "lower bound" in r.reason
    # the same pass@1 on 100 prompts with 20 discordant pairs: no evidence it is no worse -> reject
    same = [F] * 10 + [T] * 40 + [T] * 10 + [F] * 40
    r = decide(same, inc, best_promoted_pass1=0.5, **KW)
    assert r.decision == "reject" and r.lower_bound < -0.03 and "not shown to be no worse than the incumbent" in r.reason


def test_best_promoted_bound_stops_accumulated_small_losses():
    # vs the incumbent: no change on 400 prompts; vs the best promoted: 20 points lost
    inc = np.array([1.0] * 200 + [0.0] * 200)
    best = np.array([1.0] * 280 + [0.0] * 120)
    r = decide(inc.copy(), inc, best_promoted_pass1=0.7, best_promoted_scores=best, **KW)
    assert r.decision == "reject" and "best promoted" in r.reason and r.best_lower_bound < -0.03 <= r.lower_bound


def test_halt_after_consecutive_rejections_and_on_format_collapse():
    kw = {**KW, "consecutive_rejections": 1}
    assert decide([F, F], [T, T], best_promoted_pass1=1.0, **kw).decision == "halt"
    collapse = {**KW, "candidate_no_answer_rate": 0.9}
    assert decide([T, T], [T, T], best_promoted_pass1=1.0, **collapse).decision == "halt"


def test_unpaired_outcomes_rejected():
    with pytest.raises(ValueError, match="paired"):
        decide([T], [T, F], best_promoted_pass1=0.5, **KW)
    with pytest.raises(ValueError, match="best promoted"):
        decide([T, F], [T, F], best_promoted_pass1=0.5, best_promoted_scores=[T], **KW)


def test_old_rule_stays_as_an_explicit_option():
    old = {**KW, "cfg": GateConfig(rule="no_detected_drop", test="mcnemar", margin=0.05)}
    # the old rule promotes the same-pass@1 candidate the new rule rejects (no drop detected)
    inc = [T] * 50 + [F] * 50
    same = [F] * 10 + [T] * 40 + [T] * 10 + [F] * 40
    r = decide(same, inc, best_promoted_pass1=0.5, **old)
    assert r.decision == "promote" and r.rule == "no_detected_drop" and "p(worse)" in r.reason
    r = decide([T, F, F, F], [T, T, F, F], best_promoted_pass1=0.5, **old)
    assert r.decision == "reject" and "incumbent" in r.reason


def test_per_prompt_means_by_hand_and_too_few_samples():
    from ratchet.loop.gate import per_prompt_means

    assert per_prompt_means([(4, 1), (4, 4), (5, 0)], 4) == [0.25, 1.0, 0.0]
    with pytest.raises(ValueError, match="eval.num_samples >= 4"):
        per_prompt_means([(4, 1), (2, 2)], 4)


def test_gate_on_paired_means_with_bootstrap():
    cfg = GateConfig(test="bootstrap", samples_per_prompt=4, max_consecutive_rejections=3)
    kw = {**KW, "cfg": cfg}
    # Every prompt drops by 1/4: every resample's mean is -0.25 -> the bound is -0.25 < -margin
    r = decide([0.0, 0.5, 0.25, 0.75], [0.25, 0.75, 0.5, 1.0], best_promoted_pass1=0.0, **kw)
    assert r.decision == "reject" and r.lower_bound == pytest.approx(-0.25) and r.delta == pytest.approx(-0.25)
    # Every prompt gains 1/4: bound +0.25 -> promote
    r = decide([0.5, 1.0], [0.25, 0.75], best_promoted_pass1=0.5, **kw)
    assert r.decision == "promote" and r.lower_bound == pytest.approx(0.25)


def test_score_bound_refuses_means_and_config_names_the_fix():
    with pytest.raises(ValueError, match="bootstrap"):
        decide([0.5, 1.0], [1.0, 1.0], best_promoted_pass1=0.5, **KW)
    with pytest.raises(ValueError, match="gate.test = 'bootstrap'"):
        GateConfig(samples_per_prompt=4)
    with pytest.raises(ValueError, match="samples_per_prompt = 1"):
        GateConfig(samples_per_prompt=1, test="bootstrap")
    with pytest.raises(ValueError, match="no_detected_drop"):
        GateConfig(rule="noninferiority", test="mcnemar")


def test_old_tolerance_key_loads_with_a_one_line_notice(tmp_path, caplog):
    p = tmp_path / "ratchet.toml"
    p.write_text('[gate]\ntolerance = 0.02\ntest = "mcnemar"\n')
    with caplog.at_level("WARNING"):
        cfg = load_config(p)
    assert cfg.gate.margin == 0.02 and cfg.gate.test == "score" and cfg.gate.rule == "noninferiority"
    notices = [r.getMessage() for r in caplog.records if "tolerance" in r.getMessage()]
    assert len(notices) == 1 and "\n" not in notices[0] and "gate.margin" in notices[0]


def test_gate_settings_are_not_part_of_campaign_identity():
    a = load_config(None, **{"gate.margin": 0.01, "gate.alpha": 0.1})
    b = load_config(None)
    assert a.campaign_settings() == b.campaign_settings() and "gate" not in b.campaign_settings()
