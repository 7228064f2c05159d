"""``ratchet track``: write (or back-fill) a campaign's gated rounds from the store to MLflow, TensorBoard or W&B."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ratchet.flows.cli.common import DB_HELP, console, fail


def track(
    db: Path = typer.Option(Path("ratchet.duckdb"), "--db", help=DB_HELP),
    campaign: str = typer.Option(..., "--campaign", help="Campaign name."),
    to: str = typer.Option(..., "--to", help="mlflow | tensorboard | wandb"),
    uri: str = typer.Option(
        ..., "--uri", help="MLflow tracking URI (e.g. sqlite:///path/mlflow.db), or the TensorBoard / W&B offline folder."
    ),
    experiment: Optional[str] = typer.Option(
        None, "--experiment", help="MLflow experiment / W&B project (default: the campaign)."
    ),
) -> None:
    """Write every gated round the sink lacks (idempotent: a re-run writes nothing twice); docs/tracking.md."""
    from ratchet.flows.report.tracking import SINKS, TrackingError
    from ratchet.flows.report.tracking import track as track_rounds
    from ratchet.store.db import StoreError, connect, require_store

    if to not in SINKS:
        fail(f"--to {to!r} is not one of {', '.join(SINKS)}")
    try:
        with connect(db, read_only=True) as con:
            require_store(con, db)
        written, held = track_rounds(db, campaign, {to: uri}, experiment=experiment)[to]
    except (StoreError, ValueError, TrackingError) as e:
        fail(str(e))
    console.print(f"{to} {uri}\t{written} round(s) written, {held} already there", highlight=False, soft_wrap=True)
