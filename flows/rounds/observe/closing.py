"""Closing a round after its gate: the retention plan applied, and the round's plot and Prefect artifacts."""

from __future__ import annotations

import json
import re

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from ratchet.flows.rounds.observe.run_log import run_logger
from ratchet.loop.campaign.round_context import Ctx
from ratchet.store.catalog import compact
from ratchet.store.db import connect, transaction
from ratchet.store.events import events_of
from ratchet.store.read.reports import verifier_stats
from ratchet.store.retention import apply_plan, retention_plan, stage_files


def apply_retention(ctx: Ctx) -> dict:
    """After a gate: compact the store's snapshot files (``compact_after_files``), delete the weights ``[retention]``
    lets go (rows stay, ``deleted_at`` set) and, unless ``keep_stage_files``, the round's ingested stage Parquet files. Returns ``{"checkpoints": n, "bytes": freed}``."""
    r = ctx.cfg.retention
    with connect(ctx.db) as con:  # the store's nightly compaction: a no-op until a table has compact_after_files files
        merged = compact(con, ctx.db, min_files=r.compact_after_files)
    for table, (before, after) in merged.items():
        run_logger().info("store: compacted %s from %d Parquet files to %d", table, before, after)
    if not r.enabled:
        return {"checkpoints": 0, "bytes": 0}
    with transaction(ctx.db) as con:
        plan = retention_plan(con, ctx.campaign_id, ctx.checkpoints_dir, r.keep_last_promoted)
        freed = apply_plan(con, plan)
    if not r.keep_stage_files:
        for f in stage_files(ctx.campaign_dir / f"round-{ctx.round_index}"):
            freed += f.stat().st_size
            f.unlink(missing_ok=True)
    if plan:
        run_logger().info(
            "retention: deleted %d checkpoint(s) (%s), %.1f MB freed", len(plan), ", ".join(d.why for d in plan), freed / 1e6
        )
    return {"checkpoints": len(plan), "bytes": freed}


def artifact_key(ctx: Ctx, what: str) -> str:
    """Prefect artifact key of one of a round's artifacts (lowercase letters, digits and dashes only)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", f"{ctx.cfg.campaign}-round-{ctx.round_index}-{what}".lower())
    return re.sub(r"-{2,}", "-", slug).strip("-")


def publish_round(ctx: Ctx, row: dict) -> None:
    """Write the campaign's held-out pass@1 plot under the round's run dir, and, inside a Prefect run, publish
    the round's metrics, verifier statistics and gate decision (with the plot embedded) as artifacts.

    Artifacts: ``<campaign>-round-<n>-metrics`` (table, ``ratchet.flows.report.render.metrics_rows``),
    ``<campaign>-round-<n>-verifier`` (table, reward and verdict reasons per task and purpose) and
    ``<campaign>-round-<n>-gate`` (markdown, with the prompts that flipped: ``ratchet.flows.report.triage``). A task's ``.fn`` called outside a run publishes nothing.
    """
    from ratchet.flows.report.render import PLOT_NAME, data_uri, metrics_rows, write_pass1_plot
    from ratchet.flows.report.triage import flips_markdown, monitors_markdown
    from ratchet.flows.rounds.observe.progress import in_run_context

    with connect(ctx.db, read_only=True) as con:
        plot = write_pass1_plot(con, ctx.cfg.campaign, ctx.campaign_dir / f"round-{ctx.round_index}" / "report" / PLOT_NAME)
        if not in_run_context():
            return
        metrics = metrics_rows(con, ctx.round_id, ctx.verifier_version)
        stats = verifier_stats(con, ctx.round_id)
        events = events_of(con, ctx.cfg.campaign)[-5:]
        flips = flips_markdown(con, ctx.round_id) + monitors_markdown(con, ctx.round_id)
    create_table_artifact(
        key=artifact_key(ctx, "metrics"),
        table=metrics or [{"metric": "-", "scope": "-", "value": None}],
        description=f"Round {ctx.round_index}: held-out, rollout and training metrics",
    )
    create_table_artifact(
        key=artifact_key(ctx, "verifier"),
        table=stats or [{"task": "-", "n": 0}],
        description=f"Round {ctx.round_index}: reward mean/variance and verdict reasons per task",
    )
    fmt = lambda x: "—" if x is None else f"{x:.3f}"  # noqa: E731
    figure = (
        f"![held-out pass@1 across rounds]({data_uri(plot.read_bytes())})\n\nPlot file: `{plot}`"
        if plot
        else "No held-out pass@1 to plot yet."
    )
    create_markdown_artifact(
        key=artifact_key(ctx, "gate"),
        description=f"Round {ctx.round_index} gate decision",
        markdown=(
            f"## Round {ctx.round_index}: **{row['decision']}**\n\n{row['reason']}\n\n"
            f"| | held-out pass@1 |\n|---|---|\n| incumbent `{row['incumbent_checkpoint_id']}` | {fmt(row['incumbent_pass1'])} |\n"
            f"| candidate `{row['candidate_checkpoint_id']}` | {fmt(row['candidate_pass1'])} |\n"
            f"| best promoted | {fmt(row['best_promoted_pass1'])} |\n\n"
            f"rule {row.get('rule')}, margin {row['tolerance']}, lower bound of the change vs incumbent "
            f"{fmt(row.get('lower_bound'))}, vs best promoted {fmt(row.get('best_lower_bound'))}\n\n"
            + _rates_md(row.get("error_rates_json"))
            + flips
            + _events_md(events)
            + f"### Held-out pass@1 across rounds\n\n{figure}\n"
        ),
    )


def _rates_md(rates_json: str | None) -> str:
    """The rule's simulated promote rates at this eval size (``gate_plan.Plan``) as one markdown line."""
    if not rates_json:
        return ""
    r = json.loads(rates_json)
    rate = r["promote_rate"]
    return (
        f"At {r['eval_prompts']} prompts this rule promotes a candidate truly 5 points worse {rate['-0.050']:.1%} of the "
        f"time and one 5 points better {rate['+0.050']:.1%} (simulated, discordance {r['discordance']:g}; "
        f"`ratchet gate plan --eval-prompts {r['eval_prompts']}`)\n\n"
    )


def _events_md(events: list[dict]) -> str:
    """The campaign's last halts, pauses and resumes as a markdown list (empty when none)."""
    if not events:
        return ""
    lines = [
        f"- {e['created_at']} **{e['action']}** after round {e['after_round_index']} by {e['actor']}: {e['reason']}"
        for e in events
    ]
    return "### Halts, pauses and resumes\n\n" + "\n".join(lines) + "\n\n"


def track_round(ctx: Ctx) -> None:
    """Write the campaign's gated rounds that ``[tracking]``'s sinks lack (this one, and any a failure left out).

    A sink that fails is logged and skipped: the round is in the store, and the next round or `ratchet track`
    back-fills it.
    """
    if not (sinks := ctx.cfg.tracking.sinks()):
        return
    from ratchet.flows.report.tracking import track

    for name, uri in sinks.items():
        try:
            written, held = track(ctx.db, ctx.cfg.campaign, {name: uri}, experiment=ctx.cfg.tracking.experiment)[name]
            run_logger().info("tracking: %s %s: %d round(s) written, %d already there", name, uri, written, held)
        except Exception as e:  # noqa: BLE001 - sinks raise their own error types; the gated round is committed already
            run_logger().warning("tracking: %s %s failed (%s); `ratchet track --to %s` back-fills it later", name, uri, e, name)


def publish_promoted(ctx: Ctx, row: dict) -> None:
    """A promoted candidate to ``[publish]``'s registries (``ratchet.flows.report.registry``; idempotent: a resumed
    round's checkpoint is registered once). A registry that fails is logged and skipped: the promotion is committed,
    and ``ratchet publish --checkpoint ID`` does it later."""
    pub = ctx.cfg.publish
    if row.get("decision") != "promote" or not pub.targets():
        return
    from ratchet.flows.report.registry import publish_checkpoint

    cid = row["candidate_checkpoint_id"]
    try:
        lines = publish_checkpoint(
            ctx.db, ctx.cfg.campaign, cid, mlflow_model=pub.mlflow_model, mlflow_uri=pub.mlflow or ctx.cfg.tracking.mlflow,
            hf_repo=pub.hf_repo, experiment=ctx.cfg.tracking.experiment,
        )  # fmt: skip
        for line in lines:
            run_logger().info("publish: %s", line)
    except Exception as e:  # noqa: BLE001 - registries raise their own errors; the promotion is committed already
        run_logger().warning("publish: %s; `ratchet publish --checkpoint %s` does it later", e, cid)
