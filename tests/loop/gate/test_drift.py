"""Drift from the base on prompts the campaign never trains on (guard sets, else gating sets)."""

import numpy as np

from ratchet.loop.config import GateConfig
from ratchet.loop.gate import drift
from ratchet.loop.gate.eval_sets import SetScores, decide_sets

BASE = [1.0] * 100 + [0.0] * 100
GAIN = [1.0] * 140 + [0.0] * 60  # +20 points
CANARY_BASE = [1.0] * 150 + [0.0] * 50
SLID = [1.0] * 126 + [0.0] * 74  # 24 of 150 lost: -12 points from the base


def _set(name, cand, inc, role="gate", base=None):
    return SetScores(name, role, cand, inc, None, float(np.mean(inc)), 0.0, base=base)


def test_a_slow_slide_on_a_guard_set_turns_a_promotion_into_a_halt_that_says_what_to_do():
    # the incumbent already lost 12 points on the canary, the candidate 0 more: the guard (vs incumbent) passes
    sets = [_set("main", GAIN, BASE, base=BASE), _set("canary", SLID, SLID, "guard", base=CANARY_BASE)]
    cfg = GateConfig()
    res = decide_sets(sets, cfg, consecutive_rejections=0)
    assert res.decision == "promote"
    d = drift.measure(sets, cfg)
    assert [x.name for x in d] == ["canary"] and round(d[0].change, 3) == -0.12 and d[0].upper_bound < -0.05
    halted = drift.apply(res, d, cfg)
    assert halted.decision == "halt"
    assert "drift: on canary (200 prompts" in halted.reason and "gate.max_drift 0.05" in halted.reason
    assert "campaign resume" in halted.reason
    # unset: measured, never halts; a rejected round stays a rejection
    assert drift.apply(res, d, GateConfig(max_drift=None)).decision == "promote"
    rejected = decide_sets([_set("main", BASE[::-1], BASE, base=BASE)], cfg, consecutive_rejections=0)
    assert drift.apply(rejected, drift.measure([_set("main", BASE[::-1], BASE, base=BASE)], cfg), cfg) == rejected


def test_without_guard_sets_drift_is_measured_on_the_gating_sets_and_a_promotion_stands():
    sets = [_set("main", GAIN, BASE, base=BASE), _set("bench", SLID, CANARY_BASE, "report", base=CANARY_BASE)]
    d = drift.measure(sets, GateConfig())
    assert [x.name for x in d] == ["main"] and round(d[0].change, 3) == 0.2 and d[0].upper_bound > 0.2
    assert drift.halt_reason(d, GateConfig()) is None
    assert drift.measure([_set("main", GAIN, BASE)], GateConfig()) == []  # no stored base outcomes: nothing to measure
