"""Evidence on demand (``gate.sequential = true``): evaluate the candidate in batches of held-out prompts and stop as
soon as an anytime-valid bound decides, up to ``gate.max_eval_prompts``.

Every bound of the sequential gate is the betting confidence sequence of ``ratchet.loop.gate.betting``
(Waudby-Smith & Ramdas 2023), which holds at every look at once: stopping at whichever look first clears ``-margin``
keeps P(promote a candidate truly more than margin worse) <= alpha, however many looks are taken (a fixed-n bound
re-checked after each batch would not). The anytime p-value of H0 "delta <= -margin" is min(1, 1 / max_s K_s).

The prompts are taken in the pinned eval set's prompt-id order (a hash: a fixed pseudo-random order); look j covers
the first min(j x ``gate.sequential_batch_prompts``, ``gate.max_eval_prompts``, pinned size) of them, each eval set
taking its own members among them. A look ends the gate when the round is decided: every gating set cleared
(``promoted``), a guard or the no-answer rate halts (``halted``), a gating set is shown more than the margin worse
than the incumbent or the best promoted by the upper bound (``futile``), or the last look was reached
(``max_prompts``: rejected, unproven). Stopping to reject never raises the chance of a wrong promotion.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ratchet.loop.config import GateConfig
from ratchet.loop.gate.bounds import lower_bound
from ratchet.loop.gate.eval_sets import RoundGate, SetScores, decide_sets

STOPS = ("promoted", "halted", "futile", "max_prompts")  # gate_decisions.sequential_stop

_WHY = {
    "promoted": "every gating set's anytime-valid lower bound cleared -margin",
    "halted": "a guard halted",
    "futile": "a gating set is shown more than the margin worse (anytime-valid upper bound)",
    "max_prompts": "gate.max_eval_prompts reached without showing the candidate no worse",
}


def look_sizes(total: int, batch: int) -> list[int]:
    """Prompts evaluated at each look: batch, 2 batch, ..., ``total`` (the last look is ``total``).

    Raises:
        ValueError: ``total`` or ``batch`` < 1.
    """
    if total < 1 or batch < 1:
        raise ValueError(f"sequential looks need total >= 1 and batch >= 1 prompts (got {total}, {batch})")
    return [*range(batch, total, batch), total]


@dataclass(frozen=True)
class SequentialGate:
    """A sequential gate's decision, the prompts it used (in the eval set's order) and why it stopped."""

    gate: RoundGate
    prompts_used: int
    looks: int
    stop: str  # one of STOPS


def _shown_worse(s: SetScores, cfg: GateConfig) -> bool:
    """The upper bound of the change vs the incumbent (or the best promoted) is below -margin (bounds by symmetry)."""
    if -lower_bound(s.incumbent, s.candidate, cfg)[0] < -cfg.margin:
        return True
    if s.best is None:
        return False
    best_cand = s.candidate if s.best_candidate is None else s.best_candidate
    return -lower_bound(s.best, best_cand, cfg)[0] < -cfg.margin


def stop_reason(res: RoundGate, sets: Sequence[SetScores], cfg: GateConfig, n: int, total: int) -> str | None:
    """Why a look ends the sequential gate (one of ``STOPS``), or None to evaluate the next batch.

    ``res`` is the look's decision made with no rejections before it (so "halt" means a guard halted)."""
    if res.decision == "promote":
        return "promoted"
    if res.decision == "halt":
        return "halted"
    if any(s.role == "gate" and _shown_worse(s, cfg) for s in sets):
        return "futile"
    return "max_prompts" if n >= total else None


def run_sequential(
    sets_at: Callable[[int], Sequence[SetScores]], cfg: GateConfig, *, total: int, consecutive_rejections: int,
    tripped_guards: Sequence[str] = (),
) -> SequentialGate:  # fmt: skip
    """Walk the looks (``look_sizes(total, cfg.sequential_batch_prompts)``): ``sets_at(n)`` gives every eval set's
    paired scores on the first n prompts of the sequential order (evaluating them if needed); stop at the first look
    ``stop_reason`` ends, then decide with the campaign's rejections in a row. The reason says where and why it stopped.

    Raises:
        ValueError: ``cfg.sequential`` is off, and as ``decide_sets`` and ``look_sizes``.
    """
    if not cfg.sequential:
        raise ValueError("run_sequential needs gate.sequential = true (its bounds are the anytime-valid ones)")
    sizes = look_sizes(total, cfg.sequential_batch_prompts)
    probe = cfg.model_copy(update={"max_consecutive_rejections": 10**9})  # at a look, "halt" is a guard's only
    for j, n in enumerate(sizes, 1):
        sets = sets_at(n)
        stop = stop_reason(decide_sets(sets, probe, consecutive_rejections=0, tripped_guards=tripped_guards), sets, cfg, n, total)
        if stop:
            break
    res = decide_sets(sets, cfg, consecutive_rejections=consecutive_rejections, tripped_guards=tripped_guards)
    note = f"sequential: stopped after {n} of up to {total} prompts ({j} looks): {_WHY[stop]}"
    return SequentialGate(replace(res, reason=f"{res.reason}; {note}"), n, j, stop)
