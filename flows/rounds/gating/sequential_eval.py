"""The sequential gate's evaluation (``gate.sequential = true``): evaluate incumbent and candidate on the eval set in
batches (prompt-id order) until the anytime-valid bounds decide (``ratchet.loop.gate.sequential``), up to
``gate.max_eval_prompts``. Each prompt's outcome is computed once per checkpoint and stored, so an incumbent kept
after a rejection is not evaluated again on the prompts it has; the gate stage then re-walks the same looks on the
stored outcomes (they depend only on them) and records where and why it stopped."""

from __future__ import annotations

from ratchet.flows.compute.engine import RoundEngine
from ratchet.flows.rounds.gating.gate_inputs import Grouping, build_sets, sequential_total, training_guards
from ratchet.flows.rounds.observe.run_log import run_logger
from ratchet.flows.rounds.stages.pipeline import evaluate
from ratchet.loop.campaign.round_context import load_ctx
from ratchet.loop.config import RatchetConfig
from ratchet.loop.gate.eval_sets import SetScores
from ratchet.loop.gate.sequential import SequentialGate, run_sequential
from ratchet.store.db import connect
from ratchet.store.queries import campaign_state
from ratchet.store.read.reports import training_metrics


def evaluate_sequentially(
    config_path: str, round_index: int, incumbent: str, candidate: str, engine: RoundEngine
) -> SequentialGate:
    """Evaluate both checkpoints look by look until the sequential gate stops; returns what it decided on the way
    (the gate stage decides again, from the store, with the same result).

    Raises:
        RuntimeError: the evaluations do not pair (``build_sets``); whatever an evaluation raises.
    """
    ctx = load_ctx(config_path, round_index)
    g, es, grouping = ctx.cfg.gate, ctx.eval_set_id(), Grouping.of(ctx.cfg)
    with connect(ctx.db, read_only=True) as con:
        state = campaign_state(con, ctx.campaign_id, es)
        p = ctx.cfg.grpo
        guards = training_guards(
            training_metrics(con, ctx.round_id), ctx.cfg.algorithm, p.max_kl, p.min_entropy, p.max_sampler_gap
        )

    def sets_at(n: int) -> list[SetScores]:
        evaluate(config_path, round_index, incumbent, prompts=n, engine=engine)  # only prompts without a stored outcome
        evaluate(config_path, round_index, candidate, prompts=n, engine=engine)
        with connect(ctx.db, read_only=True) as con:
            return build_sets(con, grouping, ctx.campaign_id, round_index, es, incumbent, candidate, ctx.verifier_version, g,
                              prompts=n)[0]  # fmt: skip

    total = sequential_total(g, len(ctx.heldout()))
    seq = run_sequential(sets_at, g, total=total, consecutive_rejections=state.consecutive_rejections, tripped_guards=guards)
    run_logger().info("sequential gate: %s after %d of %d prompts (%s)", seq.gate.decision, seq.prompts_used, total, seq.stop)
    return seq


def sequential_warning(cfg: RatchetConfig, pinned: int) -> str | None:
    """One line when a sequential gate's ``max_eval_prompts`` exceeds the pinned eval set (it stops there)."""
    g = cfg.gate
    if g.max_eval_prompts <= pinned:
        return None
    return (
        f"gate.max_eval_prompts = {g.max_eval_prompts} but the eval set pins {pinned} prompts: the sequential gate stops "
        f"at {pinned} (raise tasks.heldout_prompts or the [[evals]] prompts, or lower gate.max_eval_prompts)"
    )
