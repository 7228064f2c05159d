"""Drift across months: how far a candidate has moved from the campaign's base checkpoint on prompts the campaign never
trains on, per round, with a halt a person can act on.

The drift sets are the round's ``role = "guard"`` eval sets (general-capability canaries), else its gating sets
(held-out prompts are never trained on either). On each, drift = pass@1(candidate) - pass@1(base) on the same
prompts, with the (1 - alpha) upper bound of that change from the gate's own bound (``lower_bound`` with the roles
swapped: Tango's score bound, the BCa bootstrap, or under ``gate.sequential`` the anytime-valid betting bound).

A guard set compared only with the incumbent cannot see a slow slide: a 1-point loss per promotion is never shown
per round, yet adds up. The drift check compares with the base, so it does. It turns a **promotion** into a halt
when the candidate is shown to sit more than ``gate.max_drift`` below the base on a drift set (upper bound <
-max_drift): only a promotion moves the campaign, and a rejected candidate is never kept. On a gating set a promoted
candidate's lower bound vs the best promoted (the base counts, so its pass@1 is >= the base's) is >= -margin, and
upper bound >= point estimate >= that lower bound; so when base and best are compared on the same prompts (always,
outside the sequential gate) and ``max_drift >= margin``, the check can only fire on a guard set: the default
(0.05 >= margin 0.03) leaves a campaign without guard sets decided as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ratchet.loop.config import GateConfig
from ratchet.loop.gate.bounds import lower_bound
from ratchet.loop.gate.eval_sets import RoundGate, SetScores


@dataclass(frozen=True)
class Drift:
    """One drift set's change from the base: pass@1 values in [0, 1] on ``n`` paired prompts."""

    name: str
    candidate_pass1: float
    base_pass1: float
    upper_bound: float  # (1 - alpha) upper bound of candidate - base
    n: int

    @property
    def change(self) -> float:
        return self.candidate_pass1 - self.base_pass1


def drift_sets(sets: Sequence[SetScores]) -> list[SetScores]:
    """The sets drift is measured on: the guard sets, else the gating sets."""
    guards = [s for s in sets if s.role == "guard"]
    return guards or [s for s in sets if s.role == "gate"]


def measure(sets: Sequence[SetScores], cfg: GateConfig) -> list[Drift]:
    """Drift of the candidate from the base on each drift set that has the base's stored outcomes (others are left out)."""
    out = []
    for s in drift_sets(sets):
        if s.base is None:
            continue
        cand = s.candidate if s.base_candidate is None else s.base_candidate
        ub = -lower_bound(s.base, cand, cfg)[0]  # upper bound of cand - base, by symmetry
        out.append(Drift(s.name, float(np.mean(cand)), float(np.mean(s.base)), ub, len(cand)))
    return out


def worst(drifts: Sequence[Drift]) -> Drift | None:
    """The drift set with the smallest upper bound (the most evidence of a slide), or None without any."""
    return min(drifts, key=lambda d: d.upper_bound, default=None)


def halt_reason(drifts: Sequence[Drift], cfg: GateConfig) -> str | None:
    """One line naming the set, the figures, the setting and what to do, when a drift set is shown below the base by
    more than ``cfg.max_drift``; None otherwise (or with ``max_drift`` unset)."""
    w = worst(drifts)
    if cfg.max_drift is None or w is None or w.upper_bound >= -cfg.max_drift:
        return None
    return (
        f"drift: on {w.name} ({w.n} prompts the campaign never trains on) pass@1 moved from the base's {w.base_pass1:.3f} "
        f"to {w.candidate_pass1:.3f}, {1 - cfg.alpha:.0%} upper bound of the change {w.upper_bound:+.3f} < -gate.max_drift "
        f"{cfg.max_drift}; look at the drift curve (`ratchet report`), lower the learning rate or raise the KL weight, "
        "then `ratchet campaign resume NAME --reason ...`"
    )


def apply(res: RoundGate, drifts: Sequence[Drift], cfg: GateConfig) -> RoundGate:
    """``res``, or a halt when it promotes a candidate the drift check stops (``halt_reason``)."""
    why = halt_reason(drifts, cfg) if res.decision == "promote" else None
    return res if why is None else replace(res, decision="halt", reason=why)
