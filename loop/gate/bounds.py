"""The gate's statistics on paired per-prompt scores: is the candidate worse, and how much worse can it be.

P-values that the candidate is worse (exact McNemar, paired bootstrap) and lower confidence bounds of the paired
difference (Tango's score bound, BCa cluster bootstrap, or the anytime-valid betting bound of
``ratchet.loop.gate.betting``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from ratchet.loop.config import GateConfig
from ratchet.loop.gate.betting import anytime_p, betting_bound

_N = NormalDist()


def mcnemar_worse_p(candidate: Sequence[bool], incumbent: Sequence[bool]) -> float:
    """One-sided exact McNemar p-value for "candidate is worse than incumbent".

    With b = #prompts only the incumbent solves and c = #prompts only the candidate solves, under
    H0 (equal accuracy) b ~ Binomial(b + c, 1/2); p = P(X >= b) (McNemar 1947, exact binomial form).

    Raises:
        ValueError: the two outcome lists differ in length (they must be paired).
    """
    if len(candidate) != len(incumbent):
        raise ValueError(
            f"paired outcomes differ in length ({len(candidate)} vs {len(incumbent)}); evaluate both on the same prompts"
        )
    b = sum(1 for x, y in zip(candidate, incumbent) if y and not x)
    c = sum(1 for x, y in zip(candidate, incumbent) if x and not y)
    n = b + c
    if n == 0:
        return 1.0
    return sum(math.comb(n, i) for i in range(b, n + 1)) / 2**n


def bootstrap_worse_p(candidate: Sequence[float], incumbent: Sequence[float], *, samples: int = 2000, seed: int = 0) -> float:
    """One-sided paired bootstrap p-value for "candidate is worse": the share of resamples of the
    per-prompt difference (candidate - incumbent) whose mean is >= 0 (Efron & Tibshirani 1993, §16.4).

    Scores are greedy outcomes (0/1) or per-prompt pass@1 estimates in [0, 1]; prompts are resampled
    with their pair, so the k samples of one prompt stay together (a cluster bootstrap).
    """
    if len(candidate) != len(incumbent):
        raise ValueError(f"paired outcomes differ in length ({len(candidate)} vs {len(incumbent)})")
    d = np.asarray(candidate, dtype=np.float64) - np.asarray(incumbent, dtype=np.float64)  # (m,)
    if not d.any():
        return 1.0
    means = _boot_means(d, samples, seed)
    return float((means >= 0).mean())


def _boot_means(d: np.ndarray, samples: int, seed: int) -> np.ndarray:
    """Means of ``samples`` resamples (with replacement) of ``d: (m,) float64``; returns ``(samples,) float64``."""
    rng = np.random.default_rng(seed)
    vals, counts = np.unique(d, return_counts=True)
    if (
        len(vals) <= 64
    ):  # greedy pairs (d in {-1, 0, 1}) or k-sample means (2k + 1 values): resampling counts is exact, ~100x faster
        draws = rng.multinomial(len(d), counts / len(d), size=samples)  # (samples, distinct)
        return draws @ vals / len(d)
    idx = rng.integers(0, len(d), size=(samples, len(d)))  # (samples, m)
    return d[idx].mean(axis=1)


# --- lower confidence bounds of the paired difference ------------------------------------------------


def tango_z(b: int, c: int, n: int, delta0: float) -> float:
    """Tango's score statistic for H0: delta = ``delta0`` on paired binary outcomes (Tango 1998, eq. 3).

    ``b``: prompts only the candidate solves, ``c``: prompts only the incumbent solves, ``n``: all prompts;
    delta = (b - c) / n is the difference of the two pass@1 values. With the restricted maximum-likelihood
    estimate q of P(only the incumbent solves) under H0 (the root of 2n q^2 + B q + C, B = -b - c +
    (2n - b + c) delta0, C = -c delta0 (1 - delta0)), Z = (b - c - n delta0) / sqrt(n (2 q + delta0 (1 - delta0))).
    At delta0 = 0 it is McNemar's statistic (b - c) / sqrt(b + c). Z decreases in ``delta0``.
    """
    a2 = 4.0 * n  # 2A
    bb = -b - c + (2 * n - b + c) * delta0
    cc = -c * delta0 * (1.0 - delta0)
    q = (math.sqrt(max(bb * bb - 2.0 * a2 * cc, 0.0)) - bb) / a2
    var = n * (2.0 * q + delta0 * (1.0 - delta0))
    num = b - c - n * delta0
    if var <= 0.0:
        return 0.0 if num == 0 else math.copysign(math.inf, num)
    return num / math.sqrt(var)


def tango_lower_bound(b: int, c: int, n: int, alpha: float) -> float:
    """One-sided (1 - ``alpha``) lower confidence bound of delta = (b - c) / n for paired 0/1 outcomes.

    The inverted score test of Tango (1998), "Equivalence test and confidence interval for the difference in
    proportions for the paired-sample design", Statistics in Medicine 17:891-908: the smallest delta0 in
    [-1, 1] with ``tango_z(b, c, n, delta0) <= z_{1-alpha}``, found by bisection (Z is monotone in delta0).
    Unlike the Wald interval it stays valid with few discordant pairs (b + c = 0 gives -z^2 / (n + z^2), not 0).

    Raises:
        ValueError: ``n`` < 1, counts outside [0, n], or ``alpha`` outside (0, 1).
    """
    if n < 1 or b < 0 or c < 0 or b + c > n or not 0.0 < alpha < 1.0:
        raise ValueError(
            f"tango_lower_bound needs 0 <= b, c and b + c <= n >= 1, 0 < alpha < 1 (got b={b}, c={c}, n={n}, alpha={alpha})"
        )
    z = _N.inv_cdf(1.0 - alpha)
    lo, hi = -1.0, (b - c) / n
    if tango_z(b, c, n, lo + 1e-12) <= z:
        return -1.0
    for _ in range(50):  # bracket width 2^-50: far below one prompt's 1/n
        mid = 0.5 * (lo + hi)
        if tango_z(b, c, n, mid) > z:
            lo = mid
        else:
            hi = mid
    return lo


def bootstrap_lower_bound(d: Sequence[float], alpha: float, *, samples: int = 2000, seed: int = 0) -> float:
    """One-sided (1 - ``alpha``) BCa bootstrap lower bound of the mean of paired differences ``d: (m,)``.

    Prompts are resampled whole (a cluster bootstrap: a prompt's k samples stay together). Bias-corrected and
    accelerated percentile (Efron 1987, "Better bootstrap confidence intervals", JASA 82:171-185; Efron &
    Tibshirani 1993, §14.3): z0 = Phi^-1(share of resampled means < the mean), acceleration a from the jackknife,
    bound = the Phi(z0 + (z0 + z_a) / (1 - a (z0 + z_a))) quantile of the resampled means.
    """
    x = np.asarray(d, dtype=np.float64)  # (m,)
    m, mean = len(x), float(x.mean())
    if m < 2 or np.all(x == x[0]):
        return mean
    means = np.sort(_boot_means(x, samples, seed))  # (samples,)
    share = (np.count_nonzero(means < mean) + 0.5 * np.count_nonzero(means == mean)) / samples
    z0 = _N.inv_cdf(min(max(share, 0.5 / samples), 1 - 0.5 / samples))
    jack = (m * mean - x) / (m - 1)  # (m,) leave-one-out means
    u = jack.mean() - jack
    den = 6.0 * float((u * u).sum()) ** 1.5
    acc = float((u**3).sum()) / den if den > 0 else 0.0
    za = _N.inv_cdf(alpha)
    q = _N.cdf(z0 + (z0 + za) / (1 - acc * (z0 + za)))
    return float(means[min(int(q * samples), samples - 1)])


def lower_bound(candidate: Sequence[float], incumbent: Sequence[float], cfg: GateConfig) -> tuple[float, float]:
    """``(lower bound, p)`` of delta = mean(candidate - incumbent) at ``cfg.alpha`` with ``cfg``'s method, and the
    one-sided p-value of the non-inferiority test H0: delta <= -cfg.margin (small p: evidence it is no worse).

    ``gate.test = "score"``: Tango's score bound (0/1 outcomes only); ``"bootstrap"``: BCa cluster bootstrap.
    ``gate.sequential``: the anytime-valid betting bound and p-value (``ratchet.loop.gate.betting``, Waudby-Smith &
    Ramdas 2023) with horizon ``gate.max_eval_prompts``, valid at every look of a sequential gate; any test.

    Raises:
        ValueError: score on scores that are not 0/1 (gate per-prompt means with test = 'bootstrap').
    """
    x, y = np.asarray(candidate, dtype=np.float64), np.asarray(incumbent, dtype=np.float64)  # (m,), (m,)
    if cfg.sequential:
        d = x - y
        return betting_bound(d, cfg.alpha, cfg.max_eval_prompts), anytime_p(d, cfg.alpha, cfg.max_eval_prompts, -cfg.margin)
    if cfg.test == "bootstrap":
        d = x - y
        means = _boot_means(d, cfg.bootstrap_samples, 0) if d.any() else np.zeros(1)
        return bootstrap_lower_bound(d, cfg.alpha, samples=cfg.bootstrap_samples), float((means <= -cfg.margin).mean())
    if not (np.isin(x, (0.0, 1.0)).all() and np.isin(y, (0.0, 1.0)).all()):
        raise ValueError("the score bound needs 0/1 outcomes per prompt; gate per-prompt means with gate.test = 'bootstrap'")
    b, c = int(np.count_nonzero(x > y)), int(np.count_nonzero(y > x))
    z = tango_z(b, c, len(x), -cfg.margin) if cfg.margin < 1 else math.inf
    return tango_lower_bound(b, c, len(x), cfg.alpha), 1.0 - _N.cdf(z)
