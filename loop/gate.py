"""The gate: promote the candidate, keep the incumbent (reject), or halt the campaign.

Inputs are paired per-prompt scores of candidate and incumbent on the same held-out prompts: greedy
outcomes (0/1, ``gate.samples_per_prompt = 0``) or paired pass@1 estimates, each prompt's mean
correctness over its k sampled completions (``gate.samples_per_prompt = k``; see ``per_prompt_means``).
The candidate is promoted only if all hold:

1. no guard tripped (no-answer rate on held-out <= ``max_no_answer_rate``, else **halt**);
2. pass@1(candidate) >= pass@1(incumbent) - tolerance;
3. pass@1(candidate) >= best pass@1 ever promoted - tolerance, so small permitted losses cannot
   accumulate round after round (the base model counts as promoted);
4. the paired test does not say "worse" at level ``alpha``.

Otherwise the round is rejected; after ``max_consecutive_rejections`` rejections in a row the
decision is **halt**.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ratchet.loop.config import GateConfig

Decision = Literal["promote", "reject", "halt"]


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
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(d), size=(samples, len(d)))  # (samples, m)
    means = d[idx].mean(axis=1)  # (samples,)
    return float((means >= 0).mean())


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
    decision: Decision
    reason: str
    candidate_pass1: float
    incumbent_pass1: float
    best_promoted_pass1: float
    delta: float
    p_value: float
    test: str
    tolerance: float


def decide(
    candidate: Sequence[float],
    incumbent: Sequence[float],
    cfg: GateConfig,
    *,
    best_promoted_pass1: float,
    consecutive_rejections: int,
    candidate_no_answer_rate: float,
    tripped_guards: Sequence[str] = (),
) -> GateResult:
    """Decide on one candidate under the campaign's ``[gate]`` settings (tolerance, test, alpha, limits).

    ``consecutive_rejections`` counts rejections before this round; ``tripped_guards`` are reasons from
    training guard metrics (KL, entropy) that force a halt. ``candidate`` / ``incumbent``: one score per
    prompt, greedy outcome (bool) or pass@1 estimate in [0, 1] (``per_prompt_means``).

    Raises:
        ValueError: unpaired or empty outcomes; McNemar on scores that are not 0/1; an unknown test name.
    """
    tolerance, test, alpha = cfg.tolerance, cfg.test, cfg.alpha
    max_consecutive_rejections, max_no_answer_rate = cfg.max_consecutive_rejections, cfg.max_no_answer_rate
    m = len(candidate)
    if m == 0 or m != len(incumbent):
        raise ValueError(
            f"gate needs paired non-empty outcomes (got {m} and {len(incumbent)}); evaluate both on the held-out set"
        )
    cand, inc = sum(candidate) / m, sum(incumbent) / m
    delta = cand - inc
    if test == "mcnemar":
        if any(x not in (0, 1) for x in (*candidate, *incumbent)):
            raise ValueError("McNemar needs 0/1 outcomes per prompt; gate per-prompt means with gate.test = 'bootstrap'")
        p = mcnemar_worse_p(candidate, incumbent)
    elif test == "bootstrap":
        p = bootstrap_worse_p(candidate, incumbent, samples=cfg.bootstrap_samples)
    else:
        raise ValueError(f"unknown gate test {test!r}; choose 'mcnemar' or 'bootstrap'")
    common = dict(
        candidate_pass1=cand,
        incumbent_pass1=inc,
        best_promoted_pass1=best_promoted_pass1,
        delta=delta,
        p_value=p,
        test=test,
        tolerance=tolerance,
    )
    if tripped_guards:
        return GateResult("halt", "; ".join(tripped_guards), **common)
    if candidate_no_answer_rate > max_no_answer_rate:
        return GateResult(
            "halt",
            f"guard: candidate gave no parseable answer on {candidate_no_answer_rate:.0%} of held-out "
            f"prompts (> {max_no_answer_rate:.0%}); format collapse",
            **common,
        )
    problems = []
    if cand < inc - tolerance:
        problems.append(f"pass@1 {cand:.3f} < incumbent {inc:.3f} - tolerance {tolerance}")
    if cand < best_promoted_pass1 - tolerance:
        problems.append(f"pass@1 {cand:.3f} < best promoted {best_promoted_pass1:.3f} - tolerance {tolerance}")
    if p < alpha:
        problems.append(f"{test} says worse (p={p:.3g} < alpha {alpha})")
    if not problems:
        return GateResult("promote", f"pass@1 {inc:.3f} -> {cand:.3f} ({delta:+.3f}), {test} p(worse)={p:.3g}", **common)
    if consecutive_rejections + 1 >= max_consecutive_rejections:
        return GateResult(
            "halt",
            "; ".join(problems) + f"; {consecutive_rejections + 1} rejections in a row "
            f"(max_consecutive_rejections = {max_consecutive_rejections})",
            **common,
        )
    return GateResult("reject", "; ".join(problems), **common)


# --- power: what a held-out set of n prompts can detect ------------------------------------------

# Share of held-out prompts on which two successive checkpoints disagree (one solves it, the other
# not). It sets the variance of the paired difference; 0.3 is conservative for greedy decoding of
# checkpoints one round apart (the README's demo rounds disagreed on 17-31% of prompts).
DISCORDANT_RATE = 0.3
POWER = 0.8


def minimum_detectable_effect(
    n_prompts: int, alpha: float, *, power: float = POWER, discordant_rate: float = DISCORDANT_RATE, samples_per_prompt: int = 1
) -> float:
    """Smallest drop in held-out pass@1 (absolute, 0..1) the paired one-sided test detects with ``power``.

    Normal approximation of the paired test (Connor 1987, sample size for McNemar's test): per-prompt
    differences d_i in {-1, 0, 1} have variance ~ ``discordant_rate``, so
    MDE = (z_{1-alpha} + z_{power}) * sqrt(discordant_rate / n). With k samples per prompt (paired
    pass@1 estimates), the within-prompt sampling part of the variance shrinks by k; half the
    discordance is taken as sampling noise: variance ~ discordant_rate * (1 + 1/k) / 2.

    Raises:
        ValueError: ``n_prompts`` < 1 or ``samples_per_prompt`` < 1.
    """
    if n_prompts < 1 or samples_per_prompt < 1:
        raise ValueError(f"n_prompts ({n_prompts}) and samples_per_prompt ({samples_per_prompt}) must be >= 1")
    from statistics import NormalDist

    z = NormalDist().inv_cdf(1 - alpha) + NormalDist().inv_cdf(power)
    var = discordant_rate if samples_per_prompt == 1 else discordant_rate * (1 + 1 / samples_per_prompt) / 2
    return z * math.sqrt(var / n_prompts)


def prompts_needed(
    effect: float, alpha: float, *, power: float = POWER, discordant_rate: float = DISCORDANT_RATE, samples_per_prompt: int = 1
) -> int:
    """Held-out prompts needed to detect a drop of ``effect`` (absolute pass@1) at ``alpha`` with ``power``."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf(1 - alpha) + NormalDist().inv_cdf(power)
    var = discordant_rate if samples_per_prompt == 1 else discordant_rate * (1 + 1 / samples_per_prompt) / 2
    return math.ceil(z * z * var / (effect * effect))


def power_warning(n_prompts: int, alpha: float, effect: float = 0.05, *, samples_per_prompt: int = 1) -> str | None:
    """A one-line warning when ``n_prompts`` (with ``samples_per_prompt`` samples each; 1 = greedy) cannot
    detect a drop of ``effect``, naming the size it needs; else None."""
    k = max(samples_per_prompt, 1)
    mde = minimum_detectable_effect(n_prompts, alpha, samples_per_prompt=k)
    if mde <= effect:
        return None
    need = prompts_needed(effect, alpha, samples_per_prompt=k)
    per = f", {k} samples each" if k > 1 else ""
    return (
        f"the gate's eval set ({n_prompts} prompts{per}) detects only drops >= {mde:.3f} pass@1 at alpha={alpha:g} "
        f"(power {POWER:g}); detecting a {effect:.2f} drop needs ~{need} held-out prompts (raise tasks.heldout_prompts)"
    )
