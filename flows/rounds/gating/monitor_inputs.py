"""The gate's reward-hacking monitors on a round's stored evaluation completions (``ratchet.loop.gate.monitors``):
read from the store, with the optional second verifier (``verifier.cross_check``), and the ``round_monitors`` rows.
Shared by the round's gate stage and ``ratchet gate replay``, so a backtest measures what a round measured."""

from __future__ import annotations

from ratchet.loop.config import MonitorsConfig
from ratchet.loop.gate import monitors as gate_monitors
from ratchet.loop.gate.monitors import Completion, Monitor
from ratchet.store.read.round_monitors import eval_completions, round_monitor_rows
from ratchet.verifiers.cross_check import cross_verdicts


def _completions(rows: list[dict], cross: list[bool | None] | None) -> list[Completion]:
    return [
        Completion(
            prompt_id=r["prompt_id"],
            tokens=int(r["completion_tokens"]),
            truncated=r["finish_reason"] == "length",
            correct=bool(r["correct"]),
            format_ok=r["format_ok"],
            answered=r["reason"] != "no_answer",
            answer=r["parsed"],
            text=r["completion"],
            cross_correct=None if cross is None else cross[i],
        )
        for i, r in enumerate(rows)
    ]


def measure_stored(
    con, eval_set_id: str, incumbent: str, candidate: str, verifier_version: str, cfg: MonitorsConfig, *,
    target_language: str = "none", cross_check: str | None = None,
) -> list[Monitor]:  # fmt: skip
    """Every monitor of the candidate against the incumbent on their stored greedy completions of the eval set (the
    prompts both have), the golds from the prompts table; with ``cross_check``, the second verifier judges both sides'
    completions first (Math-Verify: ~30 completions/s).

    Raises:
        ValueError: ``cross_check`` is unknown or not installed (``verifiers.cross_check.check_available``).
    """
    cand_rows = eval_completions(con, candidate, eval_set_id, verifier_version)
    inc_rows = eval_completions(con, incumbent, eval_set_id, verifier_version)
    on = {r["prompt_id"] for r in cand_rows} & {r["prompt_id"] for r in inc_rows}
    cand_rows = [r for r in cand_rows if r["prompt_id"] in on]
    inc_rows = [r for r in inc_rows if r["prompt_id"] in on]
    cand_cross = inc_cross = None
    if cross_check:
        both = cand_rows + inc_rows
        got = cross_verdicts(cross_check, [(r["answer"] or "", r["completion"]) for r in both])
        cand_cross, inc_cross = got[: len(cand_rows)], got[len(cand_rows) :]
    golds = {r["prompt_id"]: r["answer"] for r in cand_rows}
    scripts = gate_monitors.target_scripts(target_language, [r["question"] or "" for r in cand_rows])
    return gate_monitors.measure(_completions(cand_rows, cand_cross), _completions(inc_rows, inc_cross), golds, cfg, scripts)


def monitor_rows(round_id: str, eval_set_id: str, monitors: list[Monitor], created_at) -> list[dict]:
    """The ``round_monitors`` rows of a round's measured monitors."""
    return [
        dict(
            round_id=round_id,
            monitor=m.name,
            value=m.value,
            threshold=m.threshold,
            tripped=m.tripped,
            candidate_value=m.candidate,
            reference_value=m.reference,
            reference=m.reference_of,
            num_prompts=m.prompts,
            eval_set_id=eval_set_id,
            created_at=created_at,
        )
        for m in monitors
    ]


def stored_cross_check(con, round_id: str, cfg: MonitorsConfig) -> Monitor | None:
    """The round's stored cross-check monitor re-thresholded under ``cfg`` (replay does not run the second verifier
    again), or None when the round did not measure it."""
    for r in round_monitor_rows(con, round_id):
        if r["monitor"] == "cross_check_disagreement":
            t = cfg.cross_check_disagreement
            tripped = t is not None and r["num_prompts"] >= cfg.min_prompts and r["value"] > t
            return Monitor(
                r["monitor"], r["value"], r["candidate_value"], r["reference_value"], r["reference"], t, r["num_prompts"], tripped
            )
    return None
