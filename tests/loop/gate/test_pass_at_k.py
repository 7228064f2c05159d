"""The pass@k guard (ratchet.loop.gate.pass_at_k): the estimator, a candidate that keeps pass@1 but loses pass@k
(constructed outcomes), and its simulated error rates."""

import numpy as np
import pytest

from ratchet.loop.config import GateConfig, load_config
from ratchet.loop.evaluation.metrics import pass_at_k
from ratchet.loop.gate.error_rates import pass_at_k_gap, pass_at_k_rates, simulate_narrowing
from ratchet.loop.gate.eval_sets import SetScores, decide_sets
from ratchet.loop.gate.pass_at_k import PassAtKScores, check, pass_at_k_estimates, per_prompt_pass_at_k


def test_the_vectorised_estimator_equals_the_evaluation_metric():
    grid = [(n, c) for n in range(1, 13) for c in range(n + 1)]
    for k in (1, 2, 4, 8):
        got = [(n, c) for n, c in grid if n >= k]
        vec = pass_at_k_estimates(np.array([n for n, _ in got]), np.array([c for _, c in got]), k)
        assert vec.tolist() == pytest.approx([pass_at_k(n, c, k) for n, c in got], abs=1e-12)
    assert per_prompt_pass_at_k([(4, 2), (4, 0)], 4) == [1.0, 0.0]
    with pytest.raises(ValueError, match="eval.num_samples >= 4"):
        per_prompt_pass_at_k([(4, 2), (2, 1)], 4)


def _narrowed(m=200):
    """Greedy outcomes equal; the incumbent solves every prompt 2 times in 4 (pass@1 0.5, pass@4 1.0); the candidate
    solves half the prompts always and the other half never (pass@1 0.5, pass@4 0.5)."""
    greedy = [float(i % 2) for i in range(m)]
    inc = per_prompt_pass_at_k([(4, 2)] * m, 4)
    cand = per_prompt_pass_at_k([(4, 4 if i % 2 else 0) for i in range(m)], 4)
    return greedy, PassAtKScores(4, cand, inc, base=inc)


def test_a_candidate_that_keeps_pass1_but_loses_pass_at_k_is_rejected_by_the_guard():
    greedy, pk = _narrowed()
    plain = SetScores("heldout", "gate", greedy, greedy, None, 0.5)
    guarded = SetScores("heldout", "gate", greedy, greedy, None, 0.5, pass_k=pk)
    assert decide_sets([plain], GateConfig(), consecutive_rejections=0).decision == "promote"
    res = decide_sets([guarded], GateConfig(pass_at_k=4), consecutive_rejections=0)
    assert res.decision == "reject" and res.reason.startswith(
        "pass@4 not shown to be no worse than the incumbent: 1.000 -> 0.500"
    )
    assert "no worse than the base (1.000)" in res.reason
    (v,) = res.sets
    assert not v.passed and v.pass_k.lower_bound < -0.4 and v.result.decision == "promote"  # pass@1 alone would promote


def test_an_equal_pass_at_k_passes_and_the_promotion_quotes_it():
    greedy, pk = _narrowed()
    same = PassAtKScores(4, pk.incumbent, pk.incumbent)
    res = decide_sets(
        [SetScores("heldout", "gate", greedy, greedy, None, 0.5, pass_k=same)], GateConfig(), consecutive_rejections=0
    )
    assert res.decision == "promote" and "pass@4 1.000 -> 1.000, lower bound +0.000" in res.reason
    assert check(same, GateConfig()).passed


def test_pass_at_k_needs_enough_samples():
    with pytest.raises(ValueError, match="eval.num_samples >= 4"):
        load_config(None, **{"gate.pass_at_k": 4, "eval.num_samples": 2})
    assert load_config(None, **{"gate.pass_at_k": 4, "eval.num_samples": 4}).gate.pass_at_k == 4


def test_simulated_narrowing_keeps_pass1_and_the_guard_holds_alpha_at_the_margin():
    cn, cc, inn, ic = simulate_narrowing(400, 4, 4, -0.1, 50, seed=1)
    assert (cc / cn).mean() == pytest.approx((ic / inn).mean(), abs=0.01)  # pass@1 kept
    drop = pass_at_k_estimates(cn, cc, 4).mean() - pass_at_k_estimates(inn, ic, 4).mean()
    assert drop == pytest.approx(-0.1, abs=0.01) and pass_at_k_gap(4) == pytest.approx(0.3)
    rates = pass_at_k_rates(GateConfig(), 400, 4, trials=100, deltas=(-0.1, -0.03, 0.0))
    assert rates[-0.1] == 0.0 and rates[-0.03] <= 0.1 and rates[0.0] > 0.2
    with pytest.raises(ValueError, match="pass@4 change"):
        simulate_narrowing(10, 4, 4, +0.05, 2)


def test_gate_plan_prints_the_guards_error_rates():
    import json

    from typer.testing import CliRunner

    from ratchet.flows.cli import app

    r = CliRunner().invoke(
        app, ["gate", "plan", "--eval-prompts", "100", "--pass-at-k", "4", "--trials", "20", "--format", "json"]
    )
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)["pass_at_k"]
    assert (got["k"], got["samples"]) == (4, 4) and set(got["pass_rate"]) == {"-0.100", "-0.050", "-0.030", "-0.010", "+0.000"}
