"""A gating slice that does not wear out (``gate.refresh_after = N``): after every N promotions, each gating set's
prompts are replaced by as many fresh held-out prompts from its reserve, as a new eval set version.

Every gate decision looks at the pinned prompts, and the incumbent is kept *because* it scored well on them: its
gating score is biased upward and the selection adapts to the slice (``benchmarks/gate_longrun.py``). A fresh slice
is one nothing was selected on. Its reserve is the set's held-out prompts (never trained on: the split is fixed by the
question's hash) minus every slice ever pinned: the current and retired gating slices and the confirmation slices
(``ratchet.store.confirmation.used_heldout_ids``). Guard and report sets keep their prompts (nothing is selected on
them). The refresh runs at the start of the round after the N-th promotion, before anything is evaluated: the round's
incumbent, and the best checkpoint ever promoted (by its score on the replaced slice) when its weights are still on
disk, are evaluated on the new slice, so the gate compares on the same prompts. When a gating set's reserve holds fewer
fresh prompts than the set, one line says so and the current slice stays (a smaller slice would change the gate's
error rates); the next round tries again.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from ratchet.flows.rounds.observe.run_log import run_logger
from ratchet.flows.rounds.stages.pipeline import prompt_rows
from ratchet.loop.campaign.round_context import Ctx, load_ctx, now, pin_eval_prompts
from ratchet.loop.tasks.sources import Prompt
from ratchet.store.confirmation import eval_set_versions, replace_gating_slice, used_heldout_ids
from ratchet.store.db import transaction
from ratchet.store.ingest import insert_rows
from ratchet.store.queries import eval_set_members, gate_decision, promoted_before


def fresh_slice(
    ctx: Ctx, members: list[tuple[str, Prompt]], used: set[str], version: int
) -> tuple[list[tuple[str, Prompt]] | None, str]:
    """The eval set ``members`` (``(eval_name, prompt)`` in pinned order) with each gating set's prompts replaced by
    as many fresh ones, or None and the line that says which reserve ran short. ``used``: every prompt id pinned so
    far (``used_heldout_ids``); ``version``: the new version's number (part of the draw's seed)."""
    roles = {e.name: e.role for e in ctx.eval_cfg.evals}
    out, exclude = [], set(used)
    for name in dict.fromkeys(n for n, _ in members):
        current = [p for n, p in members if n == name]
        if roles.get(name, "gate") != "gate":
            out += [(name, p) for p in current]
            continue
        got = ctx.eval_tasks.reserve(ctx.eval_cfg, name, len(current), exclude, f"refresh-{version}")
        if len(got) < len(current):
            return None, (
                f"gate.refresh_after: the held-out reserve of eval set {name!r} is exhausted ({len(got)} fresh prompts, "
                f"{len(current)} needed); keeping the current gating slice (add held-out tasks, or unset gate.refresh_after)"
            )
        exclude |= {p.prompt_id for p in got}
        out += [(name, p) for p in got]
    return out, ""


def best_on(con, eval_set_id: str, checkpoints: list[str]) -> str | None:
    """The checkpoint of ``checkpoints`` with the highest stored held-out pass@1 on ``eval_set_id`` whose weights are
    still on disk (None: none evaluated there or none kept)."""
    rows = con.execute(
        """SELECT e.checkpoint_id, c.path FROM evaluations e JOIN checkpoints c USING (checkpoint_id)
           WHERE e.metric = 'heldout/pass@1' AND e.eval_set_id = ? AND list_contains(?, e.checkpoint_id)
                 AND c.deleted_at IS NULL ORDER BY e.value DESC, e.checkpoint_id""",
        [eval_set_id, checkpoints],
    ).fetchall()
    return next((c for c, path in rows if path and Path(path).is_dir()), None)


@task(name="refresh-eval-set", cache_policy=NONE)
def refresh_eval_set(config_path: str, round_index: int) -> dict | None:
    """Draw a fresh gating slice when ``gate.refresh_after`` promotions happened since the last one (module docstring).

    Returns ``{"eval_set_id", "replaced_eval_set_id", "best"}`` when this round refreshed (also when a resumed round
    had: ``best`` is the promoted checkpoint besides the incumbent to evaluate on the new slice, or None); None when no
    refresh was due or the reserve ran short.
    """
    ctx = load_ctx(config_path, round_index)
    every = ctx.cfg.gate.refresh_after
    if every is None:
        return None
    with transaction(ctx.db) as con:
        versions = eval_set_versions(con, ctx.campaign_id)
        last = versions[-1] if versions else None
        promoted = promoted_before(con, ctx.campaign_id, round_index)
        if last is not None and last["round_id"] == ctx.round_id:  # a resumed round: it refreshed already
            return _done(last, promoted, con)
        if gate_decision(con, ctx.round_id) or len(promoted) - 1 - (last["promotions"] if last else 0) < every:
            return None
        used = used_heldout_ids(con, ctx.campaign_id)
        names = {p: n for p, (n, _) in eval_set_members(con, ctx.campaign_id).items()}
    version = (last["version"] if last else 0) + 1
    members = [(names.get(p.prompt_id, "heldout"), p) for p in ctx.heldout()]
    slice_, why = fresh_slice(ctx, members, used, version)
    if slice_ is None:
        run_logger().warning("round %d: %s", round_index, why)
        return None
    old_es, old_ids = ctx.eval_set_id(), [p.prompt_id for p in ctx.heldout()]
    prompts = [p for _, p in slice_]
    new_es, ts = ctx.with_heldout(prompts).eval_set_id(), now()
    row = dict(
        campaign_id=ctx.campaign_id, version=version, round_id=ctx.round_id, promotions=len(promoted) - 1,
        eval_set_id=new_es, replaced_eval_set_id=old_es, num_prompts=len(prompts),
        replaced_prompt_ids_json=json.dumps(old_ids), created_at=ts,
    )  # fmt: skip
    with transaction(ctx.db) as con:
        insert_rows(con, "prompts", prompt_rows(prompts))
        pins = [dict(campaign_id=ctx.campaign_id, position=i, eval_name=n, prompt_id=p.prompt_id, created_at=ts)
                for i, (n, p) in enumerate(slice_)]  # fmt: skip
        replace_gating_slice(con, ctx.campaign_id, pins, row)
        got = _done(row, promoted, con)
    pin_eval_prompts(ctx, prompts)  # where every stage reads them (prepare-campaign rewrites it from the store too)
    run_logger().info(
        "round %d: gate.refresh_after = %d: fresh gating slice v%d (%d prompts, eval set %s replaces %s); best ever "
        "promoted evaluated on it: %s", round_index, every, version, len(prompts), new_es, old_es, got["best"] or "none kept",
    )  # fmt: skip
    return got


def _done(row: dict, promoted: list[str], con) -> dict:
    """The refresh task's result for its ``eval_set_versions`` row: the best promoted checkpoint (on the replaced
    slice) besides the incumbent (the last promoted), to evaluate on the new slice."""
    best = best_on(con, row["replaced_eval_set_id"], promoted)
    best = None if best == promoted[-1] else best  # the incumbent: evaluated by the round itself
    return {"eval_set_id": row["eval_set_id"], "replaced_eval_set_id": row["replaced_eval_set_id"], "best": best}
