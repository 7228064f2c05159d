"""What the gate's rule promotes, by simulation: promote rates of the real ``decide`` on simulated paired outcomes.

Used by ``ratchet gate plan``, the campaign preflight, the gate artifact and ``benchmarks/gate_error_rates.py``.

Model of a pair of checkpoints on n prompts (greedy, 0/1): each prompt independently falls in one of four cells,
both right / only the candidate / only the incumbent / both wrong, with P(only candidate) = (D + delta) / 2 and
P(only incumbent) = (D - delta) / 2, where D is the discordance (share of prompts the two disagree on) and
delta the true pass@1 change; the incumbent's pass@1 is ``p_incumbent``. With k samples per prompt each prompt's
latent state (solved or not, drawn as above) sets its per-sample success rate, ``SOLVED_RATE`` or
``UNSOLVED_RATE``, and the k samples are Binomial; delta is then the change of the true pass@1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ratchet.loop.config import GateConfig
from ratchet.loop.gate.decision import decide

DISCORDANCE = 0.2  # share of prompts two successive demo checkpoints disagree on (README demo rounds: 17-31%)
SOLVED_RATE, UNSOLVED_RATE = 0.85, 0.15  # per-sample success on a prompt the checkpoint solves / does not (k >= 2)
DELTAS = tuple(round(-0.10 + 0.025 * i, 3) for i in range(9))  # true pass@1 changes the plan prints
EFFECT, POWER = 0.05, 0.8


def simulate_pairs(
    n: int, delta: float, trials: int, *, discordance: float = DISCORDANCE, p_incumbent: float = 0.5, k: int = 0, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``(candidate, incumbent)`` per-prompt scores, each ``(trials, n) float64``: 0/1 (``k`` = 0) or means of k samples.

    Raises:
        ValueError: the cell probabilities are impossible (|delta| > discordance, or the incumbent's pass@1 too
            close to 0 or 1 for that discordance).
    """
    p10, p01 = (discordance + delta) / 2, (discordance - delta) / 2
    lo, hi = (UNSOLVED_RATE, SOLVED_RATE) if k else (0.0, 1.0)
    ps = (p_incumbent - lo) / (hi - lo)  # the incumbent's share of solved prompts
    p10, p01 = p10 / (hi - lo), p01 / (hi - lo)
    p11 = ps - p01
    if min(p10, p01, p11, 1 - p11 - p10 - p01) < -1e-12:
        raise ValueError(
            f"no paired outcomes have pass@1 {p_incumbent}, discordance {discordance} and delta {delta:+.3f}; "
            "need |delta| <= discordance and a discordance the incumbent's pass@1 allows (e.g. --discordance 0.2)"
        )
    rng = np.random.default_rng(seed)
    cell = rng.choice(4, size=(trials, n), p=np.clip([p11, p10, p01, 1 - p11 - p10 - p01], 0, 1))  # (trials, n)
    cand = ((cell == 0) | (cell == 1)).astype(np.float64)
    inc = ((cell == 0) | (cell == 2)).astype(np.float64)
    if not k:
        return cand, inc
    rate = lambda s: np.where(s > 0, SOLVED_RATE, UNSOLVED_RATE)  # noqa: E731
    return rng.binomial(k, rate(cand)) / k, rng.binomial(k, rate(inc)) / k


def promote_rate(
    cfg: GateConfig, n: int, delta: float, trials: int, *, discordance: float = DISCORDANCE, p_incumbent: float = 0.5, k: int = 0,
    seed: int = 0,
) -> float:  # fmt: skip
    """Share of ``trials`` simulated rounds (n prompts, true change ``delta``) that ``decide`` promotes under ``cfg``.

    The best ever promoted is the incumbent (a campaign's first round), so only the bound vs the incumbent acts.
    """
    cand, inc = simulate_pairs(n, delta, trials, discordance=discordance, p_incumbent=p_incumbent, k=k, seed=seed)
    promoted = 0
    for c, i in zip(cand, inc):
        r = decide(c, i, cfg, best_promoted_pass1=float(i.mean()), consecutive_rejections=0, candidate_no_answer_rate=0.0)
        promoted += r.decision == "promote"
    return promoted / trials


@dataclass(frozen=True)
class Plan:
    """Promote rates of the gate's rule at one eval size, and the size that meets the targets."""

    eval_prompts: int
    samples: int
    discordance: float
    trials: int
    rates: dict[float, float]  # true pass@1 change -> promote rate
    needed_prompts: int | None  # smallest size where a 5-point drop is promoted <= alpha and a 5-point gain >= 80%
    alpha: float

    def as_dict(self) -> dict:
        return {
            "eval_prompts": self.eval_prompts,
            "samples": self.samples,
            "discordance": self.discordance,
            "trials": self.trials,
            "alpha": self.alpha,
            "promote_rate": {f"{d:+.3f}": r for d, r in self.rates.items()},
            "needed_prompts": self.needed_prompts,
        }

    def summary(self) -> str:
        """One line: what this size promotes at -5 / +5 points and what size meets the targets."""
        drop, gain = self.rates.get(-EFFECT), self.rates.get(EFFECT)
        per = f" x {self.samples} samples" if self.samples else ""
        need = f"~{self.needed_prompts} prompts" if self.needed_prompts else "more than 20000 prompts"
        return (
            f"{self.eval_prompts} prompts{per}: a candidate truly {EFFECT * 100:.0f} points worse is promoted {drop:.1%} "
            f"of the time, one {EFFECT * 100:.0f} points better {gain:.1%} (discordance {self.discordance:g}, "
            f"{self.trials} simulated rounds); <= {self.alpha:g} and >= {POWER:.0%} need {need}"
        )


def meets(cfg: GateConfig, n: int, trials: int, **kw) -> bool:
    """Whether ``n`` prompts promote a 5-point drop <= alpha and a 5-point gain >= 80% (simulated)."""
    return promote_rate(cfg, n, -EFFECT, trials, **kw) <= cfg.alpha and promote_rate(cfg, n, EFFECT, trials, **kw) >= POWER


def needed_prompts(cfg: GateConfig, trials: int, *, max_prompts: int = 20000, **kw) -> int | None:
    """Smallest eval size (to ~10%, on a geometric grid refined by bisection) that ``meets`` the targets; None above
    ``max_prompts`` (e.g. a margin >= 5 points never holds a 5-point drop to alpha)."""
    lo, hi = 0, 16
    while not meets(cfg, hi, trials, **kw):
        lo, hi = hi, hi * 2
        if hi > max_prompts:
            return None
    while hi - lo > max(2, hi // 10):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if meets(cfg, mid, trials, **kw) else (mid, hi)
    return hi


def plan(
    cfg: GateConfig, eval_prompts: int, *, samples: int = 0, discordance: float = DISCORDANCE, trials: int = 400,
    deltas: tuple[float, ...] = DELTAS, p_incumbent: float = 0.5, search: bool = True,
) -> Plan:  # fmt: skip
    """Promote rates of ``decide`` under ``cfg`` for each true change in ``deltas`` at ``eval_prompts`` prompts
    (``samples`` = k per prompt, 0 = greedy), and the size meeting the targets (``search``; ~1-3 s).

    Raises:
        ValueError: ``eval_prompts`` < 1, ``trials`` < 10, samples = 1, or an impossible discordance.
    """
    if eval_prompts < 1 or trials < 10 or samples == 1 or samples < 0:
        raise ValueError(
            f"gate plan needs eval_prompts >= 1, trials >= 10 and samples 0 (greedy) or >= 2 "
            f"(got {eval_prompts}, {trials}, {samples})"
        )
    if samples and cfg.test != "bootstrap":
        cfg = cfg.model_copy(update={"test": "bootstrap", "samples_per_prompt": samples})
    kw = dict(discordance=discordance, p_incumbent=p_incumbent, k=samples)
    rates = {
        d: promote_rate(cfg, eval_prompts, d, trials, seed=i, **kw) for i, d in enumerate(sorted({*deltas, -EFFECT, EFFECT}))
    }
    need = needed_prompts(cfg, max(trials // 2, 100), **kw) if search else None
    return Plan(eval_prompts, samples, discordance, trials, rates, need, cfg.alpha)


def rounded_up(n: float) -> int:
    """``n`` rounded up to 2 significant digits (sizes quoted to people)."""
    if n <= 0:
        return 0
    e = 10 ** max(int(math.log10(n)) - 1, 0)
    return int(math.ceil(n / e) * e)


def simulate_campaign(
    cfg: GateConfig, rounds: int, n: int, *, delta: float = -0.01, discordance: float = DISCORDANCE, p_base: float = 0.5,
    seed: int = 0,
) -> dict:  # fmt: skip
    """One simulated campaign of ``rounds`` rounds on ``n`` pinned prompts in which every candidate is truly ``delta``
    better than its incumbent (negative: worse), gated by the real ``decide``; a halt ends it where it stands.

    Each candidate's outcome on a prompt is its incumbent's, flipped 0 -> 1 with probability (D + delta) / (2 (1 - p))
    and 1 -> 0 with (D - delta) / (2 p) (p: the incumbent's true pass@1, D: ``discordance``), so every checkpoint's
    outcomes are Bernoulli(its true pass@1) and a lucky checkpoint's luck carries over to its children. The best ever
    promoted (highest measured pass@1 among base and promoted) is compared on its own stored outcomes.

    Returns:
        ``{"rounds_run", "promotions", "halted", "final_true_drop"}``: the true pass@1 of the final incumbent below
        the base (positive = worse than the base).
    """
    rng = np.random.default_rng(seed)
    inc = (rng.random(n) < p_base).astype(np.float64)  # (n,) the base's outcomes
    p_inc, promoted, streak, ran = p_base, [inc], 0, 0
    for _ in range(rounds):
        ran += 1
        up, down = (discordance + delta) / (2 * (1 - p_inc)), (discordance - delta) / (2 * p_inc)
        u = rng.random(n)
        cand = np.where(inc > 0, (u >= down).astype(np.float64), (u < up).astype(np.float64))  # (n,)
        best = max(promoted, key=lambda s: s.mean())
        r = decide(
            cand, inc, cfg, best_promoted_pass1=float(best.mean()), best_promoted_scores=best,
            consecutive_rejections=streak, candidate_no_answer_rate=0.0,
        )  # fmt: skip
        if r.decision == "promote":
            inc, p_inc, streak = cand, p_inc + delta, 0
            promoted.append(cand)
        elif r.decision == "halt":
            return {"rounds_run": ran, "promotions": len(promoted) - 1, "halted": True, "final_true_drop": p_base - p_inc}
        else:
            streak += 1
    return {"rounds_run": ran, "promotions": len(promoted) - 1, "halted": False, "final_true_drop": p_base - p_inc}


def sequential_rates(
    cfg: GateConfig, delta: float, trials: int, *, total: int | None = None, discordance: float = DISCORDANCE,
    p_incumbent: float = 0.5, seed: int = 0,
) -> tuple[float, float]:  # fmt: skip
    """``(promote rate, mean prompts used)`` of the sequential gate (``ratchet.loop.gate.sequential.run_sequential``,
    the real look-by-look decision) over ``trials`` simulated greedy rounds with true change ``delta``, on up to
    ``total`` prompts (default ``cfg.max_eval_prompts``), batches of ``cfg.sequential_batch_prompts``.

    Raises:
        ValueError: ``cfg.sequential`` is off, or the cell probabilities are impossible (``simulate_pairs``).
    """
    from ratchet.loop.gate.eval_sets import SetScores
    from ratchet.loop.gate.sequential import run_sequential

    n = total or cfg.max_eval_prompts
    cand, inc = simulate_pairs(n, delta, trials, discordance=discordance, p_incumbent=p_incumbent, seed=seed)
    promoted, used = 0, 0
    for c, i in zip(cand, inc):
        at = lambda m, c=c, i=i: [SetScores("heldout", "gate", c[:m], i[:m], None, float(i[:m].mean()))]  # noqa: E731
        r = run_sequential(at, cfg, total=n, consecutive_rejections=0)
        promoted += r.gate.decision == "promote"
        used += r.prompts_used
    return promoted / trials, used / trials


PASS_K_DELTAS = (-0.10, -0.05, -0.03, -0.01, 0.0)  # true pass@k changes the pass@k plan prints (pass@1 unchanged)


def pass_at_k_gap(k: int, p_incumbent: float = 0.5) -> float:
    """E[pass@k - pass@1] of a prompt whose per-sample success rate r ~ Beta(2p, 2(1 - p)) (mean p = ``p_incumbent``):
    1 - E[(1 - r)^k] - p, with E[(1 - r)^k] = prod_{j<k} (b + j) / (a + b + j) (the Beta moment formula)."""
    a, b = 2 * p_incumbent, 2 * (1 - p_incumbent)
    return 1.0 - math.prod((b + j) / (a + b + j) for j in range(k)) - p_incumbent


def simulate_narrowing(
    n: int, k: int, samples: int, delta: float, trials: int, *, p_incumbent: float = 0.5, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(cand_n, cand_c, inc_n, inc_c)``, each ``(trials, n) int64``: sample counts of a candidate that keeps the
    incumbent's pass@1 but narrows: each prompt's success rate r ~ Beta(2p, 2(1 - p)) collapses, with probability s,
    to 1 (probability r) or 0, which keeps its expected pass@1 and lowers its pass@k by 1 - (1 - r)^k - r. s is set
    so the true pass@k change is ``delta`` (<= 0): s = -delta / ``pass_at_k_gap``.

    Raises:
        ValueError: ``delta`` > 0 or below -``pass_at_k_gap`` (no narrowing reaches it).
    """
    gap = pass_at_k_gap(k, p_incumbent)
    if not -gap <= delta <= 0:
        raise ValueError(f"a narrowing candidate's pass@{k} change must be in [-{gap:.3f}, 0] (got {delta:+.3f})")
    rng = np.random.default_rng(seed)
    r = rng.beta(2 * p_incumbent, 2 * (1 - p_incumbent), size=(trials, n))  # (trials, n)
    collapsed = rng.random((trials, n)) < -delta / gap
    rc = np.where(collapsed, (rng.random((trials, n)) < r).astype(np.float64), r)  # (trials, n)
    full = np.full((trials, n), samples, dtype=np.int64)
    return full, rng.binomial(samples, rc), full, rng.binomial(samples, r)


def pass_at_k_rates(
    cfg: GateConfig, n: int, k: int, *, samples: int | None = None, trials: int = 400,
    deltas: tuple[float, ...] = PASS_K_DELTAS, p_incumbent: float = 0.5, seed: int = 0,
) -> dict[float, float]:  # fmt: skip
    """Share of ``trials`` simulated rounds (``simulate_narrowing``: n prompts, ``samples`` >= k per prompt, pass@1
    unchanged, true pass@k change ``delta``) in which the real pass@k guard (``ratchet.loop.gate.pass_at_k.check``,
    vs the incumbent) passes, per delta: its error rates. At delta = -margin it passes ~alpha of the time.

    Raises:
        ValueError: samples < k, or a delta no narrowing reaches (``simulate_narrowing``).
    """
    from ratchet.loop.gate.pass_at_k import PassAtKScores, check, pass_at_k_estimates

    samples = k if samples is None else samples
    if samples < k:
        raise ValueError(f"the pass@{k} guard needs >= {k} samples per prompt (got {samples}); raise eval.num_samples")
    out = {}
    for j, d in enumerate(deltas):
        cn, cc, inn, ic = simulate_narrowing(n, k, samples, d, trials, p_incumbent=p_incumbent, seed=seed + j)
        cand, inc = pass_at_k_estimates(cn, cc, k), pass_at_k_estimates(inn, ic, k)  # (trials, n) each
        passed = sum(check(PassAtKScores(k, list(x), list(y)), cfg).passed for x, y in zip(cand, inc))
        out[d] = passed / trials
    return out
