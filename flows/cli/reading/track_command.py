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


def publish(
    checkpoint: str = typer.Option(
        "promoted", "--checkpoint", help="A checkpoint id (or a unique prefix of 6+ digits), or 'promoted' (the incumbent)."
    ),
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", help="Take the store, the campaign and [publish] / [tracking] from this ratchet.toml."
    ),
    db: Optional[Path] = typer.Option(None, "--db", help=DB_HELP + " Default: the config's, else ratchet.duckdb."),
    campaign: Optional[str] = typer.Option(None, "--campaign", help="Campaign name (default: the config's)."),
    mlflow_model: Optional[str] = typer.Option(
        None, "--mlflow-model", help="MLflow registered model name (publish.mlflow_model)."
    ),
    mlflow_uri: Optional[str] = typer.Option(None, "--mlflow-uri", help="MLflow URI (publish.mlflow, else tracking.mlflow)."),
    hf_repo: Optional[str] = typer.Option(None, "--hf-repo", help="Hugging Face Hub repository 'org/name' (publish.hf_repo)."),
) -> None:
    """Publish a checkpoint to a model registry: a new version of an MLflow registered model (its weights and model card
    as artifacts, its held-out pass@1 and lineage as tags; once per checkpoint), and/or a Hugging Face Hub push."""
    from ratchet.flows.report.registry import PublishError, publish_checkpoint
    from ratchet.loop.checkpoints import ModelError
    from ratchet.loop.config import ConfigError, load_config
    from ratchet.store.db import StoreError, connect, require_store

    try:
        cfg = load_config(config) if config is not None else None
    except ConfigError as e:
        fail(str(e))
    pub = cfg.publish if cfg else None
    store = db or (Path(cfg.db) if cfg else Path("ratchet.duckdb"))
    name = campaign or (cfg.campaign if cfg else None)
    model = mlflow_model or (pub.mlflow_model if pub else None)
    uri = mlflow_uri or (pub.mlflow or cfg.tracking.mlflow if cfg else None)
    repo = hf_repo or (pub.hf_repo if pub else None)
    if name is None:
        fail("pass --campaign NAME (or --config with the campaign)")
    if not (model or repo):
        fail(
            "nothing to publish to: pass --mlflow-model NAME (with --mlflow-uri) or --hf-repo ORG/NAME, or a --config with [publish]"
        )
    try:
        with connect(store, read_only=True) as con:
            require_store(con, store)
        lines = publish_checkpoint(
            store, name, checkpoint, mlflow_model=model, mlflow_uri=uri, hf_repo=repo,
            experiment=cfg.tracking.experiment if cfg else None,
        )  # fmt: skip
    except (StoreError, ValueError, LookupError, ModelError, PublishError) as e:
        fail(str(e))
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)
