"""The confirmation set (``gate.confirmation_prompts``): held-out prompts pinned beside the gating set, never gated
on, and read only when a candidate is promoted. The promoted checkpoint's greedy pass@1 there is unbiased by the
selection on the gating set (a kept incumbent's gating score is biased upward: ``benchmarks/gate_longrun.py``); it
is stored in ``gate_decisions.confirmed_pass1`` and shown beside the gating score in ``ratchet status`` and the report.
"""

from __future__ import annotations

from dataclasses import asdict

from prefect import task
from prefect.cache_policies import NONE

from ratchet.flows.rounds.stages.frame import stage_frame
from ratchet.flows.rounds.stages.multi_turn import sample_prompts
from ratchet.flows.rounds.stages.pipeline import prompt_rows, trajectory_rows, verdict_rows
from ratchet.flows.rounds.stages.round_engine import engine_for
from ratchet.loop.campaign.round_context import Ctx, load_ctx, now, short_hash
from ratchet.loop.generation.sampling import SamplingParams
from ratchet.loop.tasks.sources import Prompt
from ratchet.loop.tasks.task_sets import sub_seed
from ratchet.store.confirmation import pinned_confirmation_prompts
from ratchet.store.db import transaction
from ratchet.store.ingest import insert_rows, write_parquet
from ratchet.store.queries import eval_outcomes


def confirmation_set(con, ctx: Ctx) -> list[Prompt]:
    """The campaign's pinned confirmation prompts, or, the first time, ``gate.confirmation_prompts`` held-out prompts
    not in the gating set, drawn with their own seed and pinned (``confirmation_prompts``); [] when it is 0.

    Raises:
        ValueError: the tasks hold too few held-out prompts outside the gating set (the message says how many).
    """
    rows = pinned_confirmation_prompts(con, ctx.campaign_id)
    if rows:
        return [Prompt(**{k: r[k] for k in Prompt.__dataclass_fields__}) for r in rows]
    n, t = ctx.cfg.gate.confirmation_prompts, ctx.cfg.tasks
    if not n:
        return []
    gating = {p.prompt_id for p in ctx.heldout()}
    drawn = ctx.tasks.draw(t.heldout_prompts + n, "heldout", seed=sub_seed(t.seed, "confirmation"))
    got = [p for p in drawn if p.prompt_id not in gating][:n]
    if len(got) < n:
        raise ValueError(
            f"gate.confirmation_prompts = {n} but only {len(got)} held-out prompts lie outside the {len(gating)} gating "
            f"prompts; lower gate.confirmation_prompts or tasks.heldout_prompts, or add tasks"
        )
    insert_rows(con, "prompts", prompt_rows(got))
    insert_rows(
        con,
        "confirmation_prompts",
        [dict(campaign_id=ctx.campaign_id, position=i, prompt_id=p.prompt_id, created_at=now()) for i, p in enumerate(got)],
    )
    return got


def confirmation_eval_set_id(ctx: Ctx, prompts: list[Prompt]) -> str:
    """The confirmation set's eval set id: the gating set's decoding and verifier settings, its own prompts."""
    return short_hash(ctx.eval_set_id(), "confirmation", *[p.prompt_id for p in prompts])


@task(name="confirm", cache_policy=NONE)
def confirm(config_path: str, round_index: int, checkpoint_id: str) -> float | None:
    """Evaluate a just-promoted checkpoint (greedy) on the confirmation set and store its pass@1 in the round's
    ``gate_decisions.confirmed_pass1``; None (nothing done) without a confirmation set. Call only on promotion."""
    ctx = load_ctx(config_path, round_index)
    if not ctx.cfg.gate.confirmation_prompts:
        return None
    with transaction(ctx.db) as con:
        prompts = confirmation_set(con, ctx)
    es, got = confirmation_eval_set_id(ctx, prompts), {}
    with stage_frame(config_path, round_index, "confirm", dir_name=f"confirm-{checkpoint_id}") as s:
        files = [s.out / "greedy.parquet", s.out / "verdicts.parquet"]
        s.ingest("trajectories", files[0])
        s.ingest("verdicts", files[1])
        if not s.done:
            greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=ctx.cfg.generation.max_new_tokens_cap)
            with engine_for(ctx, checkpoint_id, None) as e, s.timer.compute():
                comps = sample_prompts(ctx, e, checkpoint_id, prompts, greedy, "confirmation set")  # episodes as the gate's
            trajs = trajectory_rows(ctx, prompts, comps, checkpoint_id, "eval_greedy", greedy, ctx.cfg.generation.backend, es)
            with s.timer.compute():
                verdicts = verdict_rows(ctx, trajs, {p.prompt_id: asdict(p) for p in prompts})
            write_parquet(trajs, files[0], "trajectories")
            write_parquet(verdicts, files[1], "verdicts")
            s.finish({"prompts": len(prompts)})
        s.on_commit(lambda con: got.update(pass1=_record(con, ctx, checkpoint_id, es)))
    s.log.info("confirmation set: %s has pass@1 %.3f on %d prompts", checkpoint_id, got["pass1"], len(prompts))
    return got["pass1"]


def _record(con, ctx: Ctx, checkpoint_id: str, es: str) -> float:
    """Store the confirmed pass@1 (an ``evaluations`` row and the round's decision columns); returns it."""
    outcomes = eval_outcomes(con, checkpoint_id, es, ctx.verifier_version)
    pass1 = sum(o["greedy_correct"] for o in outcomes) / len(outcomes)
    insert_rows(con, "evaluations", [dict(
        evaluation_id=short_hash(checkpoint_id, es, "confirmation/pass@1"), round_id=ctx.round_id,
        checkpoint_id=checkpoint_id, eval_set_id=es, metric="confirmation/pass@1", value=pass1,
        num_prompts=len(outcomes), created_at=now(),
    )])  # fmt: skip
    con.execute(
        "UPDATE gate_decisions SET confirmed_pass1 = ?, confirmation_eval_set_id = ? WHERE round_id = ?",
        [pass1, es, ctx.round_id],
    )
    return pass1
