"""The recipe commands of ``ratchet``: ``audit-gold`` (suspect gold labels) and ``sweep`` (one campaign per grid point).

Registered on the main app by ``ratchet.flows.cli`` (``register``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from ratchet.flows.cli.common import DB_HELP, console, err, fail, known_errors, safe
from ratchet.flows.settings import configure_prefect


def audit_gold(
    db: Path = typer.Option(Path("ratchet.duckdb"), "--db", help=DB_HELP),
    campaign: Optional[str] = typer.Option(None, "--campaign", help="Only this campaign (default: every campaign)."),
    min_share: float = typer.Option(
        0.75, "--min-share", help="Least share (0-1] of a prompt's samples on one answer the verifier judged wrong."
    ),
    min_samples: int = typer.Option(4, "--min-samples", help="Least samples of a prompt (across rounds) to judge a consensus."),
    format: str = typer.Option("table", "--format", help="table | json"),
) -> None:
    """Prompts where most samples agree on one answer the verifier judged wrong: the gold may be wrong.

    Exit 0 when the audit ran (findings are data, not failure); 2 on bad input or an unreadable store.
    """
    from ratchet.store.db import StoreError, connect, require_store
    from ratchet.store.read.reports import gold_audit

    if format not in ("table", "json"):
        fail(f"--format {format!r} is not one of table, json")
    if not db.exists():
        fail(f"{db} does not exist; pass the --db of a Ratchet store")
    try:
        with connect(db, read_only=True) as con:
            require_store(con, db)
            rows = gold_audit(con, campaign=campaign, min_share=min_share, min_samples=min_samples)
    except (StoreError, ValueError) as e:
        fail(str(e))
    if format == "json":
        print(json.dumps({"min_share": min_share, "min_samples": min_samples, "findings": rows}, indent=1))
        return
    if not rows:
        console.print(f"no prompt has >= {min_share:.0%} of >= {min_samples} samples on one wrong answer", highlight=False)
        return
    t = Table(title=f"suspect gold labels in {db} (>= {min_share:.0%} of samples agree on an answer judged wrong)")
    for c in ["campaign", "prompt", "question", "gold", "majority", "votes/samples", "correct", "rounds"]:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(
            r["campaign"],
            r["prompt_id"][:12],
            r["question"][:80],
            r["gold"],
            r["majority_answer"],
            f"{r['votes']}/{r['samples']} ({r['share']:.0%})",
            str(r["correct_samples"]),
            str(r["rounds"]),
        )
    console.print(t)


def sweep(
    config: Path = typer.Option(Path("ratchet.toml"), "--config", "-c", help="Base campaign config (TOML)."),
    grid: list[str] = typer.Option(
        ..., "--grid", help="KEY=V1,V2,... (repeatable); the sweep runs the product, e.g. --grid grpo.beta=0.001,0.01"
    ),
    campaign: Optional[str] = typer.Option(
        None, "--campaign", help="Which campaign of the config is the base, when it declares several [[campaigns]]."
    ),
    db: Optional[Path] = typer.Option(None, "--db", help=DB_HELP + " Overrides the config's db."),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Folder for sweep.csv/json/md/png (default: <run dir>/sweep-<base campaign>)."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show Prefect's run logs in the terminal."),
) -> None:
    """Run one campaign per grid point, one at a time (named <campaign>-<key><value>...), then compare them.

    Re-running the same sweep resumes its campaigns. Exit 0 when every point ran; 1 when some failed
    (the comparison is still written and names the failure); 2 on bad input.
    """
    configure_prefect(quiet_console=not verbose)
    from ratchet.flows.report.sweep_report import write_comparison
    from ratchet.loop.campaign.sweep import parse_grid, sweep_configs
    from ratchet.loop.config import ConfigError, load_config

    try:
        base = load_config(config, db=str(db) if db else None, campaign=campaign)
        points = sweep_configs(base, grid)
    except ConfigError as e:
        fail(str(e))
    keys = [parse_grid(g)[0] for g in grid]
    console.print(f"sweep of {len(points)} campaigns: " + ", ".join(c.campaign for _, c in points), highlight=False)
    from ratchet.flows.cli.running.run_commands import campaign_api

    try:
        with campaign_api():  # one locked server for every point
            status = [_run_point(cfg, i, len(points)) for i, (_, cfg) in enumerate(points, 1)]
    except known_errors() as e:
        fail(str(e))
    from ratchet.flows.report.sweep_report import comparison_rows, markdown

    rows = comparison_rows(base.db, [p for p, _ in points], [c.campaign for _, c in points], status)
    paths = write_comparison(rows, keys, out or base.resolved_run_dir() / f"sweep-{base.campaign}")
    console.print(markdown(rows, keys), highlight=False, soft_wrap=True)
    console.print("wrote " + ", ".join(str(p) for p in paths.values()), highlight=False, soft_wrap=True)
    if any(s != "completed" for s in status):
        raise typer.Exit(1)


def _run_point(cfg, i: int, n: int) -> str:
    """Run one grid point's campaign to its end; ``"completed"`` or ``"failed: <why>"`` (the sweep goes on)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ratchet.flows.cli.running.reporters import cli_reporter
    from ratchet.flows.rounds.campaign import preflight, run_campaign
    from ratchet.flows.rounds.observe.progress import set_reporter
    from ratchet.flows.rounds.state.identity import with_campaign_epoch
    from ratchet.loop.campaign.round_context import save_config

    console.print(Text(safe(f"({i}/{n}) campaign {cfg.campaign}"), style="bold"))
    cols = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    try:
        cfg = with_campaign_epoch(cfg)
        preflight(cfg)
        with Progress(*cols, console=console, transient=False, disable=not console.is_terminal) as progress:
            set_reporter(cli_reporter(progress))
            run_campaign(save_config(cfg))
    except known_errors() as e:
        err.print(f"campaign {cfg.campaign} failed: {e}", highlight=False, soft_wrap=True)
        return f"failed: {e}"
    finally:
        set_reporter(None)
    return "completed"


def register(app: typer.Typer) -> None:
    """Add ``audit-gold`` and ``sweep`` to the main CLI."""
    app.command("audit-gold")(audit_gold)
    app.command("sweep")(sweep)
