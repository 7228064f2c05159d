"""The pass@k guard (``gate.pass_at_k = K``): a gating eval set passes only if the candidate is also shown to be no
worse than the incumbent, and than the campaign's base, on the unbiased pass@k estimate per prompt.

Why: verifiable-reward RL tends to raise pass@1 while narrowing what the model can reach, so pass@k at large k can
fall below the base model's (Yue et al. 2025, "Does Reinforcement Learning Really Incentivize Reasoning Capacity in
LLMs Beyond the Base Model?"). The gate's pass@1 bound cannot see that.

Per prompt, from its n sampled completions of which c are correct, the unbiased estimator
pass@k = 1 - C(n - c, k) / C(n, k) (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1;
``pass_at_k_estimates``). The paired per-prompt differences are bounded like per-prompt means:
a one-sided (1 - alpha) BCa cluster bootstrap over prompts (Efron 1987; a prompt's samples stay together), or under
``gate.sequential`` the anytime-valid betting bound (Waudby-Smith & Ramdas 2023). The set passes the guard when both
bounds (vs the incumbent, vs the base where it has samples) are >= -margin: an intersection-union test (Berger 1982)
like the pass@1 rule, so with the pass@1 bounds a candidate truly more than margin worse on either is promoted with
probability <= alpha.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ratchet.loop.config import GateConfig
from ratchet.loop.gate.betting import betting_bound
from ratchet.loop.gate.bounds import bootstrap_lower_bound


def pass_at_k_estimates(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k per prompt, vectorised: ``n, c: (..., m) int`` samples and correct ones -> ``(..., m) float64``.

    pass@k = 1 - C(n - c, k) / C(n, k) (Chen et al. 2021, eq. 1), as the stable product
    1 - prod_{i = n-c+1}^{n} (1 - k / i), which is 1 when n - c < k. The same formula as
    ``ratchet.loop.evaluation.metrics.pass_at_k`` (a sibling layer this package may not import; a test holds them
    equal). Requires n >= k >= 1 and 0 <= c <= n (``per_prompt_pass_at_k`` checks n).
    """
    n, c = np.asarray(n, dtype=np.int64), np.asarray(c, dtype=np.int64)
    top = int(n.max()) if n.size else 0
    i = np.arange(1, top + 1, dtype=np.float64)  # (top,)
    factors = 1.0 - k / i  # (top,) factor of i; used only where i > n - c, i <= n
    use = (i > (n - c)[..., None]) & (i <= n[..., None])  # (..., m, top)
    prod = np.where(use, factors, 1.0).prod(axis=-1)  # (..., m)
    return np.where(n - c < k, 1.0, 1.0 - prod)


def per_prompt_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> list[float]:
    """Each prompt's unbiased pass@k estimate (Chen et al. 2021, eq. 1; ``pass_at_k_estimates``) from its ``(n, c)``.

    Raises:
        ValueError: a prompt has fewer than ``k`` samples (set eval.num_samples >= gate.pass_at_k).
    """
    short = [n for n, _ in counts if n < k]
    if short:
        raise ValueError(
            f"{len(short)} held-out prompts have {min(short)} < gate.pass_at_k={k} sampled completions; set "
            f"eval.num_samples >= {k} (a stored evaluation without them is re-run by deleting it, or by a new eval set)"
        )
    if not counts:
        return []
    n, c = zip(*counts, strict=True)
    return pass_at_k_estimates(np.array(n), np.array(c), k).tolist()


def paired_bound(candidate: Sequence[float], reference: Sequence[float], cfg: GateConfig) -> float:
    """One-sided (1 - ``cfg.alpha``) lower bound of mean(candidate - reference) over prompts (values in [0, 1]):
    BCa cluster bootstrap (``bootstrap_lower_bound``), or the betting bound under ``cfg.sequential``."""
    d = np.asarray(candidate, dtype=np.float64) - np.asarray(reference, dtype=np.float64)  # (m,)
    if cfg.sequential:
        return betting_bound(d, cfg.alpha, cfg.max_eval_prompts)
    return bootstrap_lower_bound(d, cfg.alpha, samples=cfg.bootstrap_samples)


@dataclass(frozen=True)
class PassAtKScores:
    """A set's paired per-prompt pass@k estimates: candidate and incumbent on the same prompts; the base and the
    candidate on the prompts the base has samples on (None: the base has none)."""

    k: int
    candidate: Sequence[float]
    incumbent: Sequence[float]
    base: Sequence[float] | None = None
    base_candidate: Sequence[float] | None = None


@dataclass(frozen=True)
class PassAtKCheck:
    """The guard's verdict on one set: pass@k means, both lower bounds of the change, and why it failed (None: passed)."""

    k: int
    candidate: float
    incumbent: float
    lower_bound: float
    base: float | None
    base_lower_bound: float | None
    problem: str | None

    @property
    def passed(self) -> bool:
        return self.problem is None


def check(s: PassAtKScores, cfg: GateConfig) -> PassAtKCheck:
    """Decide the pass@k guard on one set (see the module docstring).

    Raises:
        ValueError: unpaired or empty estimates.
    """
    if not s.candidate or len(s.candidate) != len(s.incumbent):
        raise ValueError(f"the pass@k guard needs paired non-empty estimates (got {len(s.candidate)}, {len(s.incumbent)})")
    cand, inc = float(np.mean(s.candidate)), float(np.mean(s.incumbent))
    lb = paired_bound(s.candidate, s.incumbent, cfg)
    base = base_lb = None
    if s.base is not None and len(s.base):
        paired = s.candidate if s.base_candidate is None else s.base_candidate
        base, base_lb = float(np.mean(s.base)), paired_bound(paired, s.base, cfg)
    conf, m, k = f"{1 - cfg.alpha:.0%}", cfg.margin, s.k
    problems = []
    if lb < -m:
        problems.append(
            f"pass@{k} not shown to be no worse than the incumbent: {inc:.3f} -> {cand:.3f} on {len(s.candidate)} prompts, "
            f"{conf} lower bound of the change {lb:+.3f} < -margin {m}"
        )
    if base_lb is not None and base_lb < -m:
        problems.append(f"pass@{k} not shown to be no worse than the base ({base:.3f}): {conf} lower bound {base_lb:+.3f} < -{m}")
    return PassAtKCheck(k, cand, inc, lb, base, base_lb, "; ".join(problems) or None)
