"""The gate over every eval set of a round: each set decided on its own, the round promoted only if every
``role = "gate"`` set passes; a ``guard`` set halts the campaign when shown to regress; ``report`` sets are measured.

Requiring every gating set (and, within a set, the bounds vs the incumbent and vs the best promoted) is an
intersection-union test (Berger 1982): a candidate truly more than ``margin`` worse on any one set is promoted with
probability <= alpha, with no multiplicity correction. With ``gate.pass_at_k`` a gating set must also pass the pass@k
guard (``ratchet.loop.gate.pass_at_k``), one more bound in the same intersection. Pooled figures are for the report, never for the decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ratchet.loop.config import GateConfig
from ratchet.loop.gate.bounds import lower_bound
from ratchet.loop.gate.decision import Decision, GateResult, decide
from ratchet.loop.gate.pass_at_k import PassAtKCheck, PassAtKScores
from ratchet.loop.gate.pass_at_k import check as check_pass_at_k

Role = str  # "gate" | "guard" | "report"


@dataclass(frozen=True)
class SetScores:
    """One eval set's paired per-prompt scores (same prompts, same order; 0/1 or per-prompt means in [0, 1])."""

    name: str
    role: Role
    candidate: Sequence[float]
    incumbent: Sequence[float]
    best: Sequence[float] | None  # the best checkpoint ever promoted on this set (None: no stored outcomes)
    best_pass1: float
    candidate_no_answer_rate: float = 0.0
    best_candidate: Sequence[float] | None = None  # the candidate paired with ``best`` when that covers fewer prompts
    base: Sequence[float] | None = None  # the campaign's base checkpoint on this set (drift; None: no stored outcomes)
    base_candidate: Sequence[float] | None = None  # the candidate paired with ``base`` when that covers fewer prompts
    pass_k: PassAtKScores | None = None  # per-prompt pass@k estimates (gate.pass_at_k; None: the guard is off)


@dataclass(frozen=True)
class SetVerdict:
    name: str
    role: Role
    passed: bool
    result: GateResult
    pass_k: PassAtKCheck | None = None  # the pass@k guard's verdict on a gating set (gate.pass_at_k)


@dataclass(frozen=True)
class RoundGate:
    decision: Decision
    reason: str
    sets: tuple[SetVerdict, ...]
    p_value: float  # the intersection-union p: the largest of the gating sets' p-values
    lower_bound: float | None  # the smallest gating set's bound vs the incumbent
    best_lower_bound: float | None


def decide_sets(
    sets: Sequence[SetScores], cfg: GateConfig, *, consecutive_rejections: int, tripped_guards: Sequence[str] = ()
) -> RoundGate:
    """Decide a round over its eval sets (see the module docstring).

    Raises:
        ValueError: no set has role 'gate', or a set's outcomes are unpaired / empty (``decide``).
    """
    if not any(s.role == "gate" for s in sets):
        raise ValueError(
            f"no eval set has role = 'gate' (sets: {[s.name for s in sets]}); give at least one [[evals]] role = 'gate'"
        )
    verdicts, halts, fails = [], list(tripped_guards), []
    for s in sets:
        r = decide(
            s.candidate, s.incumbent, cfg, best_promoted_pass1=s.best_pass1, best_promoted_scores=s.best,
            best_candidate_scores=s.best_candidate,
            consecutive_rejections=0, candidate_no_answer_rate=s.candidate_no_answer_rate if s.role != "report" else 0.0,
        )  # fmt: skip
        label = f"{s.name}: " if len(sets) > 1 else ""
        chk = check_pass_at_k(s.pass_k, cfg) if s.pass_k is not None and s.role == "gate" else None
        if s.role == "gate":
            passed = r.decision == "promote" and (chk is None or chk.passed)
            (halts if r.decision == "halt" else fails).extend([] if r.decision == "promote" else [label + r.reason])
            if chk is not None and not chk.passed and r.decision != "halt":
                fails.append(label + chk.problem)
        elif s.role == "guard":
            ub = -lower_bound(s.incumbent, s.candidate, cfg)[0]  # upper bound of the change, by symmetry
            passed = r.decision != "halt" and ub >= -cfg.margin
            if r.decision == "halt":
                halts.append(label + r.reason)
            elif not passed:
                halts.append(
                    f"guard set {s.name} regressed: pass@1 {r.incumbent_pass1:.3f} -> {r.candidate_pass1:.3f}, "
                    f"{1 - cfg.alpha:.0%} upper bound of the change {ub:+.3f} < -margin {cfg.margin}"
                )
        else:
            passed = True
        verdicts.append(SetVerdict(s.name, s.role, passed, r, chk))
    gating = [v.result for v in verdicts if v.role == "gate"]
    bounds = [r.lower_bound for r in gating if r.lower_bound is not None]
    best_bounds = [r.best_lower_bound for r in gating if r.best_lower_bound is not None]
    common = dict(
        sets=tuple(verdicts), p_value=max(r.p_value for r in gating),
        lower_bound=min(bounds) if bounds else None, best_lower_bound=min(best_bounds) if best_bounds else None,
    )  # fmt: skip
    if halts:
        return RoundGate("halt", "; ".join(halts), **common)
    if not fails:
        reason = "; ".join(
            (f"{v.name}: " if len(sets) > 1 else "") + v.result.reason + _pass_k_note(v.pass_k)
            for v in verdicts
            if v.role == "gate"
        )
        return RoundGate("promote", reason, **common)
    reason = "; ".join(fails)
    if consecutive_rejections + 1 >= cfg.max_consecutive_rejections:
        reason += (
            f"; {consecutive_rejections + 1} rejections in a row (max_consecutive_rejections = {cfg.max_consecutive_rejections})"
        )
        return RoundGate("halt", reason, **common)
    return RoundGate("reject", reason, **common)


def _pass_k_note(chk: PassAtKCheck | None) -> str:
    """``'; pass@k a -> b, lower bound ...'`` of a passed pass@k guard, for a promotion's reason ('' when off)."""
    if chk is None:
        return ""
    base = f", vs base {chk.base_lower_bound:+.3f}" if chk.base_lower_bound is not None else ""
    return f"; pass@{chk.k} {chk.incumbent:.3f} -> {chk.candidate:.3f}, lower bound {chk.lower_bound:+.3f}{base}"


def pooled(sets: Sequence[SetScores]) -> tuple[float, float]:
    """Pooled ``(candidate, incumbent)`` pass@1 over every set's prompts (for the report only)."""
    cand = np.concatenate([np.asarray(s.candidate, dtype=np.float64) for s in sets])
    inc = np.concatenate([np.asarray(s.incumbent, dtype=np.float64) for s in sets])
    return float(cand.mean()), float(inc.mean())
