"""The long-run simulation (ratchet.loop.gate.longrun) on a few short campaigns: the flip model keeps its discordance
valid near 0 and 1, the confirmation slice is unbiased where the gating slice is not, and a refresh happens."""

import numpy as np
import pytest

from ratchet.loop.config import GateConfig
from ratchet.loop.gate.longrun import _child, feasible, simulate_long_campaign, summarize


def test_the_flip_model_gives_the_child_its_true_pass1_even_near_saturation():
    rng = np.random.default_rng(0)
    for p, delta in [(0.5, -0.02), (0.93, 0.04), (0.05, -0.03)]:
        parent = (rng.random(200_000) < p).astype(np.float64)
        dd, d = feasible(p, delta, 0.2)
        child = _child(parent, p, dd, d, rng)
        assert child.mean() == pytest.approx(p + dd, abs=0.004)
        assert np.mean(child != parent) == pytest.approx(d, abs=0.004) and d <= 0.2


def test_confirmation_is_unbiased_the_gating_score_is_not_and_refreshes_happen():
    cfg = GateConfig()
    runs = [simulate_long_campaign(cfg, rounds=40, gating=200, confirmation=200, seed=s) for s in range(30)]
    s = summarize(runs)
    assert s["reported_bias"] > 0.01  # the winner's curse of the score that selected the incumbent
    assert abs(s["confirmed_bias"]) < 0.015 and s["promotions_mean"] > 1
    fresh = simulate_long_campaign(cfg, rounds=40, gating=200, confirmation=200, refresh_after=1, seed=3)
    assert fresh.refreshes == fresh.promotions > 0
    with pytest.raises(ValueError, match="refresh_after"):
        simulate_long_campaign(cfg, refresh_after=0)
