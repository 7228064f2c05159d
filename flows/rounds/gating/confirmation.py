"""The confirmation set (``gate.confirmation_prompts``, per ``[[evals]]`` entry its ``confirmation_prompts``):
held-out prompts pinned beside each gating set, never gated on, and read only when a candidate is promoted. The promoted
checkpoint's greedy pass@1 there is unbiased by the selection on the gating set (a kept incumbent's gating score is
biased upward: ``benchmarks/gate_longrun.py``); it is stored in ``gate_decisions.confirmed_pass1`` (over every slice)
and per set in ``gate_set_decisions.confirmed_pass1``, and shown beside the gating score in ``ratchet status`` and the
report.
"""

from __future__ import annotations

from dataclasses import asdict

from prefect import task
from prefect.cache_policies import NONE

from ratchet.flows.rounds.gating.gate_inputs import Grouping
from ratchet.flows.rounds.stages.frame import stage_frame
from ratchet.flows.rounds.stages.multi_turn import sample_prompts
from ratchet.flows.rounds.stages.pipeline import prompt_rows, trajectory_rows, verdict_rows
from ratchet.flows.rounds.stages.round_engine import engine_for
from ratchet.loop.campaign.round_context import Ctx, load_ctx, now, short_hash
from ratchet.loop.generation.sampling import SamplingParams
from ratchet.loop.tasks.sources import Prompt
from ratchet.store.confirmation import pinned_confirmation_prompts, used_heldout_ids
from ratchet.store.db import transaction
from ratchet.store.ingest import insert_rows, write_parquet
from ratchet.store.queries import eval_outcomes


def confirmation_sizes(ctx: Ctx) -> dict[str, int]:
    """``{eval set name: confirmation prompts}`` of the sets that have a confirmation slice: ``'heldout'`` with
    ``gate.confirmation_prompts`` without ``[[evals]]``, else each entry's ``confirmation_size`` (0: left out)."""
    cfg, n = ctx.eval_cfg, ctx.cfg.gate.confirmation_prompts
    if not cfg.evals:
        return {"heldout": n} if n else {}
    return {e.name: k for e in cfg.evals if (k := e.confirmation_size(n))}


def confirmation_set(con, ctx: Ctx) -> list[tuple[str, Prompt]]:
    """The campaign's pinned confirmation slices (``(eval_name, prompt)`` in order), or, the first time, for each eval
    set of ``confirmation_sizes`` that many held-out prompts from the set's own reserve (``TaskSet.reserve``: outside
    every slice pinned so far, gating or retired), drawn with their own seed and pinned (``confirmation_prompts``);
    [] when no set has one.

    Raises:
        ValueError: a set's reserve holds too few held-out prompts (the message names the set and how many).
    """
    rows = pinned_confirmation_prompts(con, ctx.campaign_id)
    if rows:
        return [(r["eval_name"], Prompt(**{k: r[k] for k in Prompt.__dataclass_fields__})) for r in rows]
    sizes = confirmation_sizes(ctx)
    if not sizes:
        return []
    used, got = used_heldout_ids(con, ctx.campaign_id) | {p.prompt_id for p in ctx.heldout()}, []
    for name, n in sizes.items():
        drawn = ctx.eval_tasks.reserve(ctx.eval_cfg, name, n, used, "confirmation")
        if len(drawn) < n:
            raise ValueError(
                f"the confirmation slice of eval set {name!r} needs {n} prompts but only {len(drawn)} held-out prompts lie "
                f"outside the {len(used)} pinned ones; lower its confirmation_prompts (or gate.confirmation_prompts), "
                "shrink the gating set, or add held-out tasks"
            )
        used |= {p.prompt_id for p in drawn}
        got += [(name, p) for p in drawn]
    insert_rows(con, "prompts", prompt_rows([p for _, p in got]))
    insert_rows(
        con,
        "confirmation_prompts",
        [dict(campaign_id=ctx.campaign_id, position=i, prompt_id=p.prompt_id, eval_name=name, created_at=now())
         for i, (name, p) in enumerate(got)],
    )  # fmt: skip
    return got


def confirmation_eval_set_id(ctx: Ctx, prompts: list[Prompt]) -> str:
    """The confirmation slices' eval set id: the gating set's decoding and verifier settings, their own prompts (the
    same id across gating-slice refreshes)."""
    return short_hash(ctx.with_heldout(prompts).eval_set_id(), "confirmation")


@task(name="confirm", cache_policy=NONE)
def confirm(config_path: str, round_index: int, checkpoint_id: str) -> float | None:
    """Evaluate a just-promoted checkpoint (greedy) on the confirmation slices and store its pass@1: over them all in
    the round's ``gate_decisions.confirmed_pass1``, per eval set in its ``gate_set_decisions.confirmed_pass1``; None
    (nothing done) without a confirmation slice. Call only on promotion."""
    ctx = load_ctx(config_path, round_index)
    if not confirmation_sizes(ctx):
        return None
    with transaction(ctx.db) as con:
        named = confirmation_set(con, ctx)
    prompts = [p for _, p in named]
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
        s.on_commit(lambda con: got.update(_record(con, ctx, checkpoint_id, es, named)))
    per_set = ", ".join(f"{k} {v:.3f}" for k, v in got["sets"].items())
    s.log.info("confirmation set: %s has pass@1 %.3f on %d prompts (%s)", checkpoint_id, got["pass1"], len(prompts), per_set)
    return got["pass1"]


def confirmed_per_set(ctx: Ctx, outcomes: list[dict], named: list[tuple[str, Prompt]]) -> dict[str, tuple[float, int]]:
    """``{gate set name: (greedy pass@1, prompts)}`` over the confirmation outcomes, each prompt under the name the gate
    gives its set (``Grouping.key``: its [[evals]] name, or its source when the pooled set is gated per source)."""
    grouping = Grouping.of(ctx.eval_cfg)
    key = {p.prompt_id: grouping.key(name, p.source) for name, p in named}
    by: dict[str, list[bool]] = {}
    for o in outcomes:
        by.setdefault(key[o["prompt_id"]], []).append(bool(o["greedy_correct"]))
    return {k: (sum(v) / len(v), len(v)) for k, v in by.items()}


def _record(con, ctx: Ctx, checkpoint_id: str, es: str, named: list[tuple[str, Prompt]]) -> dict:
    """Store the confirmed pass@1 (``evaluations`` rows, the round's decision columns, each set's verdict row);
    returns ``{"pass1": over every slice, "sets": {name: pass@1}}``."""
    outcomes = eval_outcomes(con, checkpoint_id, es, ctx.verifier_version)
    pass1 = sum(o["greedy_correct"] for o in outcomes) / len(outcomes)
    sets = confirmed_per_set(ctx, outcomes, named)
    metrics = {"confirmation/pass@1": (pass1, len(outcomes))}
    if len(sets) > 1:
        metrics |= {f"confirmation/{k}/pass@1": v for k, v in sets.items()}
    insert_rows(con, "evaluations", [dict(
        evaluation_id=short_hash(checkpoint_id, es, m), round_id=ctx.round_id, checkpoint_id=checkpoint_id,
        eval_set_id=es, metric=m, value=v, num_prompts=n, created_at=now(),
    ) for m, (v, n) in metrics.items()])  # fmt: skip
    con.execute(
        "UPDATE gate_decisions SET confirmed_pass1 = ?, confirmation_eval_set_id = ? WHERE round_id = ?",
        [pass1, es, ctx.round_id],
    )
    for name, (v, _) in sets.items():
        con.execute(
            "UPDATE gate_set_decisions SET confirmed_pass1 = ? WHERE round_id = ? AND eval_name = ?", [v, ctx.round_id, name]
        )
    return {"pass1": pass1, "sets": {k: v for k, (v, _) in sets.items()}}
