"""A year of nights, simulated with the real ``decide``: how far a campaign's true pass@1 drifts from its base over
hundreds of gate decisions on the same pinned prompts, and how biased the gating score is (the winner's curse).

Model (``simulate_long_campaign``): a campaign of ``rounds`` nights on ``gating`` pinned prompts and a second slice of
``confirmation`` prompts. Each night's candidate is truly ``delta`` better than its incumbent, ``delta`` drawn
independently from N(``delta_mean``, ``delta_sd``²). As in ``error_rates.simulate_campaign``, a candidate's outcome on
a prompt is its incumbent's flipped 0 -> 1 with probability (D + delta) / (2 (1 - p)) and 1 -> 0 with
(D - delta) / (2 p) (p: the incumbent's true pass@1, D: the discordance), on both slices, so each checkpoint's
outcomes are Bernoulli(its true pass@1) and a lucky incumbent's luck carries over to its children. ``decide`` sees the
gating slice only, against the incumbent and the best ever promoted (highest measured pass@1, on its own stored
outcomes). The confirmation slice is read only when a candidate is promoted: the promoted checkpoint's score there
was never used to select it, so it estimates its true pass@1 without the selection bias. A halt (``decide`` after
``max_consecutive_rejections``) is lifted the next night, as a person's ``ratchet campaign resume`` would: the
campaign keeps running.

With ``refresh_after`` = N, after every N promotions the gating slice is replaced by fresh prompts never gated on: the
incumbent and the best promoted are measured there (fresh Bernoulli outcomes of their true pass@1) before the next
decision, and the best-ever comparison continues on the new slice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ratchet.loop.config import GateConfig
from ratchet.loop.gate.decision import decide
from ratchet.loop.gate.error_rates import DISCORDANCE


@dataclass(frozen=True)
class LongRun:
    """One simulated campaign's end: the final incumbent's true change from the base, its reported (gating slice)
    and confirmed (confirmation slice) pass@1 against its true pass@1, and what happened on the way."""

    true_change: float  # final incumbent's true pass@1 - the base's
    reported_error: float | None  # its gating-slice pass@1 - true (None: never promoted)
    confirmed_error: float | None  # its confirmation-slice pass@1 - true (None: never promoted)
    promotions: int
    halts: int
    refreshes: int


def feasible(p: float, delta: float, d: float) -> tuple[float, float]:
    """``(delta, discordance)`` a flip model can have from true pass@1 ``p``: delta kept in [-p, 1 - p] and within the
    discordance, the discordance lowered near 0 or 1 (it needs d + delta <= 2 (1 - p) and d - delta <= 2 p)."""
    delta = float(np.clip(delta, -p, 1 - p))
    d = min(d, 2 * (1 - p) - delta, 2 * p + delta)
    return float(np.clip(delta, -d, d)), d


def _child(parent: np.ndarray, p: float, delta: float, d: float, rng: np.random.Generator) -> np.ndarray:
    """A checkpoint ``delta`` better than ``parent`` (true pass@1 ``p``): the parent's outcomes ``(n,)`` flipped, 0 -> 1
    with probability (d + delta) / (2 (1 - p)) and 1 -> 0 with (d - delta) / (2 p) (``feasible`` keeps both <= 1)."""
    up = (d + delta) / (2 * (1 - p)) if p < 1 else 0.0
    down = (d - delta) / (2 * p) if p > 0 else 0.0
    u = rng.random(parent.shape)
    return np.where(parent > 0, u >= down, u < up).astype(np.float64)


def simulate_long_campaign(
    cfg: GateConfig, *, rounds: int = 200, gating: int = 400, confirmation: int = 200, delta_mean: float = -0.005,
    delta_sd: float = 0.02, discordance: float = DISCORDANCE, p_base: float = 0.5, refresh_after: int | None = None,
    seed: int = 0,
) -> LongRun:  # fmt: skip
    """One campaign under the model of the module docstring, decided by the real ``decide`` under ``cfg``.

    Raises:
        ValueError: ``refresh_after`` < 1, or a slice with no prompts.
    """
    if refresh_after is not None and refresh_after < 1:
        raise ValueError(f"refresh_after ({refresh_after}) must be >= 1 promotions, or None (never refresh)")
    if gating < 1 or confirmation < 1:
        raise ValueError(f"the gating ({gating}) and confirmation ({confirmation}) slices need >= 1 prompt each")
    rng = np.random.default_rng(seed)
    inc = (rng.random(gating) < p_base).astype(np.float64)  # (gating,) the base's outcomes
    inc_conf = (rng.random(confirmation) < p_base).astype(np.float64)
    p_inc, streak, promotions, halts, refreshes, since = p_base, 0, 0, 0, 0, 0
    promoted: list[tuple[np.ndarray, float]] = [(inc, p_base)]  # (outcomes on the current slice, true pass@1)
    confirmed = None
    for _ in range(rounds):
        delta, d = feasible(p_inc, float(rng.normal(delta_mean, delta_sd)), discordance)
        cand = _child(inc, p_inc, delta, d, rng)
        cand_conf = _child(inc_conf, p_inc, delta, d, rng)
        best, _ = max(promoted, key=lambda s: s[0].mean())
        r = decide(
            cand, inc, cfg, best_promoted_pass1=float(best.mean()), best_promoted_scores=best,
            consecutive_rejections=streak, candidate_no_answer_rate=0.0,
        )  # fmt: skip
        if r.decision == "promote":
            inc, inc_conf, p_inc, streak = cand, cand_conf, p_inc + delta, 0
            promoted.append((cand, p_inc))
            confirmed = float(cand_conf.mean())  # read now, on promotion only
            promotions, since = promotions + 1, since + 1
            if refresh_after is not None and since >= refresh_after:
                # a fresh gating slice: the incumbent and the best promoted measured on it before the next decision
                _, p_best = max(promoted, key=lambda s: s[0].mean())
                inc = (rng.random(gating) < p_inc).astype(np.float64)
                fresh_best = (rng.random(gating) < p_best).astype(np.float64)
                promoted = [(inc, p_inc), (fresh_best, p_best)]
                refreshes, since = refreshes + 1, 0
        elif r.decision == "halt":
            halts, streak = halts + 1, 0  # resumed the next night
        else:
            streak += 1
    reported = None if not promotions else float(inc.mean()) - p_inc
    return LongRun(p_inc - p_base, reported, None if confirmed is None else confirmed - p_inc, promotions, halts, refreshes)


def summarize(runs: list[LongRun]) -> dict:
    """``true_drift_p05`` (5th percentile of the final true change from the base), ``reported_bias`` and
    ``confirmed_bias`` (mean error of the final incumbent's gating and confirmation scores, campaigns with a
    promotion), and means of promotions, halts and refreshes."""
    changes = np.array([r.true_change for r in runs])
    rep = [r.reported_error for r in runs if r.reported_error is not None]
    conf = [r.confirmed_error for r in runs if r.confirmed_error is not None]
    return {
        "true_drift_p05": float(np.percentile(changes, 5)),
        "true_drift_median": float(np.median(changes)),
        "reported_bias": float(np.mean(rep)) if rep else None,
        "confirmed_bias": float(np.mean(conf)) if conf else None,
        "campaigns": len(runs),
        "promotions_mean": float(np.mean([r.promotions for r in runs])),
        "halts_mean": float(np.mean([r.halts for r in runs])),
        "refreshes_mean": float(np.mean([r.refreshes for r in runs])),
    }
