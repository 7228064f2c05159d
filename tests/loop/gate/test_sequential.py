"""The sequential gate: the betting confidence sequence (Waudby-Smith & Ramdas 2023) and the look-by-look decision."""

import math

import numpy as np
import pytest

from ratchet.loop.config import GateConfig
from ratchet.loop.gate import decide
from ratchet.loop.gate.betting import anytime_p, betting_bound
from ratchet.loop.gate.error_rates import sequential_rates
from ratchet.loop.gate.eval_sets import SetScores
from ratchet.loop.gate.sequential import look_sizes, run_sequential

SEQ = GateConfig(sequential=True, max_eval_prompts=400, sequential_batch_prompts=100)


def test_bound_by_hand_when_every_bet_is_capped():
    # all d = 1: every bet is the cap 1/2 (the variance estimate stays <= 1/4), so K_t(m) = (1 + (1 - m) / 2)^t and the
    # bound solves K_t(m) = 1/alpha: m = 3 - 2 * 20^(1/t), delta = 2 m - 1
    for t in (8, 10, 30):
        assert betting_bound([1.0] * t, 0.05, 1) == pytest.approx(5 - 4 * 20 ** (1 / t), abs=1e-9)
    # 4 wins cannot reach 1/alpha = 20 even at m = 0 (1.5^4 = 5.1): no evidence at all
    assert betting_bound([1.0] * 4, 0.05, 1) == -1.0
    assert betting_bound([0.0] * 50, 0.05, 50) < 0  # no change observed: the bound is below 0, never at it


def test_bound_never_falls_and_p_agrees_with_it():
    rng = np.random.default_rng(3)
    d = rng.choice([-1.0, 0.0, 1.0], size=400, p=[0.07, 0.8, 0.13])
    bounds = [betting_bound(d[:t], 0.05, 400) for t in range(20, 401, 20)]
    assert all(b2 >= b1 for b1, b2 in zip(bounds, bounds[1:]))  # the running maximum over prefixes
    for t in (100, 200, 400):
        lb, p = betting_bound(d[:t], 0.05, 400), anytime_p(d[:t], 0.05, 400, -0.03)
        assert (p <= 0.05) == (lb >= -0.03)


def test_coverage_holds_at_every_look_at_once():
    # P(the bound ever exceeds the true mean) <= alpha, taking the worst prefix of each sequence
    rng = np.random.default_rng(0)
    mu, trials = 0.0, 400
    d = rng.choice([-1.0, 0.0, 1.0], size=(trials, 500), p=[0.1, 0.8, 0.1])
    misses = sum(betting_bound(row, 0.05, 500) > mu for row in d)
    assert misses / trials <= 0.05


def test_tighter_than_nothing_and_looser_than_the_fixed_bound_at_the_horizon():
    rng = np.random.default_rng(1)
    c = (rng.random(1000) < 0.6).astype(float)
    i = np.where(rng.random(1000) < 0.2, 1 - c, c)
    seq = decide(c, i, GateConfig(sequential=True), best_promoted_pass1=i.mean(), consecutive_rejections=0,
                 candidate_no_answer_rate=0.0)  # fmt: skip
    fixed = decide(c, i, GateConfig(), best_promoted_pass1=i.mean(), consecutive_rejections=0, candidate_no_answer_rate=0.0)
    assert -1 < seq.lower_bound < fixed.lower_bound < seq.delta


def _sets(c, i):
    c, i = np.asarray(c, dtype=float), np.asarray(i, dtype=float)
    return lambda n: [SetScores("heldout", "gate", c[:n], i[:n], None, float(i[:n].mean()))]


def test_clear_gain_stops_at_the_first_look_it_can():
    i = np.array([1.0, 0.0] * 200)
    c = np.ones(400)  # +50 points
    r = run_sequential(_sets(c, i), SEQ, total=400, consecutive_rejections=0)
    assert r.gate.decision == "promote" and r.stop == "promoted" and r.prompts_used == 100 and r.looks == 1
    assert "sequential: stopped after 100 of up to 400 prompts (1 looks)" in r.gate.reason


def test_clear_loss_stops_as_futile_and_an_unproven_one_runs_to_the_maximum():
    i = np.array([1.0, 0.0] * 200)
    worse = np.zeros(400)  # -50 points
    r = run_sequential(_sets(worse, i), SEQ, total=400, consecutive_rejections=0)
    assert r.gate.decision == "reject" and r.stop == "futile" and r.prompts_used == 100
    same = i.copy()
    same[:40] = 1 - same[:40]  # 40 discordant prompts, no change: never shown either way
    r = run_sequential(_sets(same, i), SEQ, total=400, consecutive_rejections=1)
    assert r.stop == "max_prompts" and r.prompts_used == 400 and r.looks == 4
    assert r.gate.decision == "halt" and "2 rejections in a row" in r.gate.reason  # the real count decides at the end
    once = SEQ.model_copy(update={"max_consecutive_rejections": 1})  # halts on the first rejection, yet looks on
    r = run_sequential(_sets(same, i), once, total=400, consecutive_rejections=0)
    assert r.stop == "max_prompts" and r.gate.decision == "halt"


def test_a_tripped_guard_stops_at_the_first_look():
    i = np.array([1.0, 0.0] * 200)
    r = run_sequential(_sets(i, i), SEQ, total=400, consecutive_rejections=0, tripped_guards=["guard: KL 9 > 0.5"])
    assert r.gate.decision == "halt" and r.stop == "halted" and r.prompts_used == 100


def test_looks_and_settings_are_checked():
    assert look_sizes(250, 100) == [100, 200, 250] and look_sizes(50, 100) == [50]
    with pytest.raises(ValueError, match="batch >= 1"):
        look_sizes(0, 100)
    with pytest.raises(ValueError, match="gate.rule = 'noninferiority'"):
        GateConfig(sequential=True, rule="no_detected_drop", test="mcnemar")
    with pytest.raises(ValueError, match="gate.sequential = true"):
        run_sequential(_sets([1.0], [1.0]), GateConfig(), total=1, consecutive_rejections=0)


def test_simulated_error_rates_of_the_sequential_rule():
    """The real look-by-look rule on simulated rounds: a 5-point drop is (almost) never promoted, a 10-point gain is,
    and it stops early when it can (benchmarks/gate_error_rates.py measures more trials)."""
    drop, used_drop = sequential_rates(SEQ, -0.05, 60, seed=1)
    gain, used_gain = sequential_rates(SEQ, 0.10, 60, seed=2)
    assert drop <= 0.05 and gain >= 0.8 and used_gain < used_drop <= 400
    assert math.isfinite(used_gain)
