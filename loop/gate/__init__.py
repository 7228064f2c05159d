"""The gate: promote the candidate, keep the incumbent (reject), or halt the campaign.

Inputs are paired per-prompt scores of candidate and incumbent on the same held-out prompts: greedy
outcomes (0/1, ``gate.samples_per_prompt = 0``) or paired pass@1 estimates, each prompt's mean
correctness over its k sampled completions (``gate.samples_per_prompt = k``; see ``per_prompt_means``).

The default rule, ``gate.rule = "noninferiority"``, promotes only on evidence. With
delta = pass@1(candidate) - pass@1(incumbent), the candidate is promoted only if all hold:

1. no guard tripped (no-answer rate on held-out <= ``max_no_answer_rate``, training guards; else **halt**);
2. the one-sided (1 - alpha) lower confidence bound of delta vs the incumbent is >= -margin;
3. the same bound vs the best checkpoint ever promoted (the base counts), on its stored per-prompt
   outcomes on the same prompts, is >= -margin, so small losses cannot accumulate round after round.

Both must hold (an intersection-union test, Berger 1982: the chance of promoting a candidate truly more
than ``margin`` worse than either stays <= alpha without a multiplicity correction). The bound for greedy
0/1 outcomes is Tango's score interval for paired proportions (``tango_lower_bound``); for per-prompt
means, a BCa cluster bootstrap over prompts (``bootstrap_lower_bound``). Absence of evidence of a drop
is not evidence of no drop: a small eval set rejects an unproven candidate instead of promoting it.

``gate.rule = "no_detected_drop"`` is the rule of Ratchet <= 0.1 (kept as an explicit option, never the
default): promote unless the point estimate is more than ``margin`` below the incumbent or the best ever
promoted, or the paired test (exact McNemar, or bootstrap) says "worse" at ``alpha``. At 48 prompts it
promoted a candidate truly 5 points worse 39% of the time (``benchmarks/gate_error_rates.py``).

Otherwise the round is rejected; after ``max_consecutive_rejections`` rejections in a row the
decision is **halt**.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Literal

import numpy as np

from ratchet.loop.config import GateConfig
from ratchet.loop.gate.betting import anytime_p, betting_bound

Decision = Literal["promote", "reject", "halt"]

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


def per_prompt_means(counts: Sequence[tuple[int, int]], k: int) -> list[float]:
    """Paired pass@1 estimates: each prompt's ``c / n`` over its ``n`` sampled completions (``c`` correct).

    ``counts`` is one ``(n, c)`` per held-out prompt, in the same prompt order for both checkpoints.

    Raises:
        ValueError: a prompt has fewer than ``k`` samples (raise eval.num_samples to >= gate.samples_per_prompt).
    """
    short = [i for i, (n, _) in enumerate(counts) if n < k]
    if short:
        n_min = min(counts[i][0] for i in short)
        raise ValueError(
            f"{len(short)} held-out prompts have {n_min} < gate.samples_per_prompt={k} sampled completions; "
            f"set eval.num_samples >= {k} and re-run the evaluate stage"
        )
    return [c / n for n, c in counts]


@dataclass(frozen=True)
class GateResult:
    """One gate decision on one eval set, with the figures it rests on (pass@1 values in [0, 1])."""

    decision: Decision
    reason: str
    candidate_pass1: float
    incumbent_pass1: float
    best_promoted_pass1: float
    delta: float
    p_value: float  # noninferiority: p of H0 "delta <= -margin"; no_detected_drop: the test's p(worse)
    test: str
    margin: float
    rule: str = "noninferiority"
    lower_bound: float | None = None  # (1 - alpha) lower bound of delta vs the incumbent
    best_lower_bound: float | None = None  # the same vs the best checkpoint ever promoted
    n: int = 0
    alpha: float = 0.05
    problems: tuple[str, ...] = field(default=())

    @property
    def tolerance(self) -> float:
        """The old name of ``margin``."""
        return self.margin


def decide(
    candidate: Sequence[float],
    incumbent: Sequence[float],
    cfg: GateConfig,
    *,
    best_promoted_pass1: float,
    consecutive_rejections: int,
    candidate_no_answer_rate: float,
    tripped_guards: Sequence[str] = (),
    best_promoted_scores: Sequence[float] | None = None,
    best_candidate_scores: Sequence[float] | None = None,
) -> GateResult:
    """Decide on one candidate and one eval set under the campaign's ``[gate]`` settings (rule, margin, alpha, limits).

    ``candidate`` / ``incumbent``: one score per prompt, greedy outcome (bool / 0-1) or pass@1 estimate in [0, 1]
    (``per_prompt_means``). ``best_promoted_scores``: the best checkpoint ever promoted, on the same prompts in the
    same order; without it the floor is its point estimate ``best_promoted_pass1`` minus margin.
    ``best_candidate_scores``: the candidate's scores paired with ``best_promoted_scores`` when the best promoted has
    outcomes on fewer prompts (a sequential gate's earlier, shorter evaluation); default: ``candidate``.
    ``consecutive_rejections`` counts rejections before this round; ``tripped_guards`` are reasons from training
    guard metrics (KL, entropy) that force a halt. Takes ~0.1 ms on 1000 greedy prompts (score bound).

    Raises:
        ValueError: unpaired or empty outcomes; McNemar or the score bound on scores that are not 0/1.
    """
    m = len(candidate)
    best_cand = candidate if best_candidate_scores is None else best_candidate_scores
    if m == 0 or m != len(incumbent) or (best_promoted_scores is not None and len(best_promoted_scores) != len(best_cand)):
        raise ValueError(
            f"gate needs paired non-empty outcomes (got {m}, {len(incumbent)}"
            + (f" and {len(best_promoted_scores)} for the best promoted" if best_promoted_scores is not None else "")
            + "); evaluate every checkpoint on the same held-out prompts"
        )
    cand, inc = float(np.mean(candidate)), float(np.mean(incumbent))
    delta = cand - inc
    if cfg.rule == "no_detected_drop":
        p, lb, best_lb = _worse_p(candidate, incumbent, cfg), None, None
    else:
        lb, p = lower_bound(candidate, incumbent, cfg)
        best_lb = lower_bound(best_cand, best_promoted_scores, cfg)[0] if best_promoted_scores is not None else None
    best = float(np.mean(best_promoted_scores)) if best_promoted_scores is not None else best_promoted_pass1
    common = dict(
        candidate_pass1=cand, incumbent_pass1=inc, best_promoted_pass1=best, delta=delta, p_value=p, test=cfg.test,
        margin=cfg.margin, rule=cfg.rule, lower_bound=lb, best_lower_bound=best_lb, n=m, alpha=cfg.alpha,
    )  # fmt: skip
    if tripped_guards:
        return GateResult("halt", "; ".join(tripped_guards), **common)
    if candidate_no_answer_rate > cfg.max_no_answer_rate:
        return GateResult(
            "halt",
            f"guard: candidate gave no parseable answer on {candidate_no_answer_rate:.0%} of held-out "
            f"prompts (> {cfg.max_no_answer_rate:.0%}); format collapse",
            **common,
        )
    problems = _problems(cfg, cand, inc, best, p, lb, best_lb, m)
    if not problems:
        return GateResult("promote", _promote_reason(cfg, cand, inc, p, lb, best_lb), **common)
    if consecutive_rejections + 1 >= cfg.max_consecutive_rejections:
        return GateResult(
            "halt",
            "; ".join(problems) + f"; {consecutive_rejections + 1} rejections in a row "
            f"(max_consecutive_rejections = {cfg.max_consecutive_rejections})",
            problems=tuple(problems),
            **common,
        )
    return GateResult("reject", "; ".join(problems), problems=tuple(problems), **common)


def _worse_p(candidate: Sequence[float], incumbent: Sequence[float], cfg: GateConfig) -> float:
    if cfg.test == "bootstrap":
        return bootstrap_worse_p(candidate, incumbent, samples=cfg.bootstrap_samples)
    if any(x not in (0, 1) for x in (*candidate, *incumbent)):
        raise ValueError("McNemar needs 0/1 outcomes per prompt; gate per-prompt means with gate.test = 'bootstrap'")
    return mcnemar_worse_p(candidate, incumbent)


def _problems(cfg: GateConfig, cand, inc, best, p, lb, best_lb, m) -> list[str]:
    """Why the candidate may not be promoted, one phrase each (empty: promote)."""
    margin, conf = cfg.margin, f"{1 - cfg.alpha:.0%}"
    out = []
    if cfg.rule == "no_detected_drop":
        if cand < inc - margin:
            out.append(f"pass@1 {cand:.3f} < incumbent {inc:.3f} - margin {margin}")
        if cand < best - margin:
            out.append(f"pass@1 {cand:.3f} < best promoted {best:.3f} - margin {margin}")
        if p < cfg.alpha:
            out.append(f"{cfg.test} says worse (p={p:.3g} < alpha {cfg.alpha})")
        return out
    if lb < -margin:
        out.append(
            f"not shown to be no worse than the incumbent: pass@1 {inc:.3f} -> {cand:.3f} on {m} prompts, "
            f"{conf} lower bound of the change {lb:+.3f} < -margin {margin}"
        )
    if best_lb is not None and best_lb < -margin:
        out.append(f"not shown to be no worse than the best promoted ({best:.3f}): {conf} lower bound {best_lb:+.3f} < -{margin}")
    elif best_lb is None and cand < best - margin:
        out.append(f"pass@1 {cand:.3f} < best promoted {best:.3f} - margin {margin}")
    return out


def _promote_reason(cfg: GateConfig, cand, inc, p, lb, best_lb) -> str:
    head = f"pass@1 {inc:.3f} -> {cand:.3f} ({cand - inc:+.3f})"
    if cfg.rule == "no_detected_drop":
        return f"{head}, {cfg.test} p(worse)={p:.3g}"
    conf = f"{1 - cfg.alpha:.0%}"
    vs_best = f", vs best promoted {best_lb:+.3f}" if best_lb is not None else ""
    return f"{head}; {conf} lower bound of the change {lb:+.3f} >= -margin {cfg.margin}{vs_best}"
