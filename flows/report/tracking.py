"""Tracking sinks: a campaign's gated rounds, read from the store, written to MLflow, TensorBoard or W&B (offline).

The store stays the source of truth. Every gated round becomes one record (:class:`RoundRecord`): the campaign's
settings, the round's run settings (max_rounds, schedule) and the gate settings it decided with as params, the round's metrics with their ``split/name`` (held-out ``heldout/*`` of the candidate and
``incumbent/heldout/*`` of the incumbent, ``rollout/*``, ``train/*`` and ``perf/*`` as the training run stored them, ``gate/*``), the checkpoint ids and the
decision as tags, and the report and pass@1 plot as artifacts. :func:`track` writes every record a sink does not
hold yet, so it back-fills a sink added later and a re-run writes nothing twice (``ratchet track``; after each
round when ``[tracking]`` names a sink). The sinks' packages are the ``tracking`` extra (``pip install
'ratchet[tracking]'``: mlflow-skinny, tensorboard); ``wandb`` is installed on its own.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from ratchet.common.files import atomic_write_text
from ratchet.store.db import connect
from ratchet.store.read.round_metrics import rollout_metrics, round_evaluations, round_training

logger = logging.getLogger(__name__)

SINKS = ("mlflow", "tensorboard", "wandb")
_DONE_TAG = "gate/promoted"  # written last for each round: a sink that holds it for a round holds the whole round


class TrackingError(RuntimeError):
    """A sink cannot be written (its package is missing, or its URI or folder is unusable)."""


@dataclass(frozen=True)
class RoundRecord:
    """One gated round as the sinks see it (every value read from the store)."""

    round_index: int
    round_id: str
    finished_at_ms: int  # when the round finished (Unix ms): the metrics' timestamp
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str] = field(default_factory=dict)


def round_records(con: duckdb.DuckDBPyConnection, campaign: str) -> list[RoundRecord]:
    """Every round of ``campaign`` whose gate decided, in round order.

    Raises:
        ValueError: no such campaign (the message lists the store's campaigns).
    """
    row = con.execute("SELECT campaign_id, base_checkpoint_id, config_json FROM campaigns WHERE name = ?", [campaign]).fetchone()
    if row is None:
        names = [r[0] for r in con.execute("SELECT name FROM campaigns ORDER BY name").fetchall()]
        raise ValueError(f"no campaign {campaign!r} in the store; campaigns: {', '.join(names) or 'none'}")
    campaign_id, base_id, config_json = row
    settings = json.loads(config_json)  # the settings that define the campaign; the round's own below
    cur = con.execute(
        """SELECT r.round_index, r.round_id, epoch_ms(coalesce(r.finished_at, g.created_at)) AS finished_ms,
                  m.run_settings_json, g.* EXCLUDE (round_id, campaign_id)
           FROM gate_decisions g JOIN rounds r USING (round_id) LEFT JOIN round_manifests m USING (round_id)
           WHERE g.campaign_id = ? ORDER BY r.round_index""",
        [campaign_id],
    )
    cols = [d[0] for d in cur.description]
    records = []
    for values in cur.fetchall():
        g = dict(zip(cols, values))
        gate_settings = json.loads(g["settings_json"]) if g.get("settings_json") else {}  # what this gate ran with
        run_settings = json.loads(g["run_settings_json"]) if g.get("run_settings_json") else {}  # max_rounds, schedule
        params = _flatten({**settings, **run_settings, "gate": gate_settings})
        metrics = _round_metrics(con, g["round_id"])
        for name in ("candidate_pass1", "incumbent_pass1", "best_promoted_pass1", "delta", "p_value", "lower_bound"):
            if isinstance(g.get(name), (int, float)):
                metrics[f"gate/{name}"] = float(g[name])
        metrics[_DONE_TAG] = float(g["decision"] == "promote")
        tags = {
            "ratchet.campaign": campaign,
            "ratchet.round_id": g["round_id"],
            "ratchet.round_index": str(g["round_index"]),
            "ratchet.decision": g["decision"],
            "ratchet.base_checkpoint_id": base_id,
            "ratchet.incumbent_checkpoint_id": g["incumbent_checkpoint_id"],
            "ratchet.candidate_checkpoint_id": g["candidate_checkpoint_id"] or "",
            "ratchet.gate_reason": str(g["reason"])[:5000],
        }
        records.append(RoundRecord(g["round_index"], g["round_id"], int(g["finished_ms"]), params, metrics, tags))
    return records


def _round_metrics(con: duckdb.DuckDBPyConnection, round_id: str) -> dict[str, float]:
    """The round's held-out, rollout and training metrics by ``split/name`` (numbers only)."""
    out: dict[str, float] = {}
    for e in round_evaluations(con, round_id):  # held-out metrics of the candidate; the incumbent's under incumbent/
        out[e["metric"] if e["role"] == "candidate" else f"{e['role']}/{e['metric']}"] = float(e["value"])
    for r in rollout_metrics(con, round_id):
        if r["task"] == "all":
            for name, key in (("pass@1", "pass_at_1"), (f"pass@{r['k']}", "pass_at_k"), ("reward_mean", "reward_mean")):
                out[f"rollout/{name}"] = float(r[key])
            for name in ("format_error_rate", "truncated_rate", "completion_tokens_p90"):
                if r[name] is not None:
                    out[f"rollout/{name}"] = float(r[name])
    if (t := round_training(con, round_id)) is not None:  # every scalar the run stored, by its own name (train/*, perf/*)
        out.update({k: float(v) for k, v in (t["metrics"] or {}).items() if v is not None})
        out.setdefault("train/examples", float(t["num_examples"]))
    return out


def _flatten(d: dict | list, prefix: str = "") -> dict[str, str]:
    """Nested settings as ``{"section.key": "value"}`` (lists by index; values JSON, at most 500 characters)."""
    items = d.items() if isinstance(d, dict) else enumerate(d)
    out: dict[str, str] = {}
    for k, v in items:
        key = f"{prefix}{k}"
        if isinstance(v, (dict, list)) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = (v if isinstance(v, str) else json.dumps(v))[:500]
    return out


def track(db: str | Path, campaign: str, sinks: dict[str, str], *, experiment: str | None = None) -> dict[str, tuple[int, int]]:
    """Write every gated round of ``campaign`` that a sink lacks; ``sinks``: ``{"mlflow": tracking URI, "tensorboard":
    log dir, "wandb": offline dir}``. ``experiment``: the MLflow experiment / W&B project (default: the campaign).

    Returns:
        ``{sink: (rounds written, rounds it already held)}``.
    Raises:
        ValueError: an unknown sink, or no such campaign.
        TrackingError: a sink's package is missing, or it cannot be written.
    """
    if unknown := sorted(set(sinks) - set(SINKS)):
        raise ValueError(f"unknown tracking sink(s) {', '.join(unknown)}; use {', '.join(SINKS)}")
    from ratchet.flows.report.render import PLOT_NAME, write_pass1_plot, write_report

    writers = {"mlflow": _to_mlflow, "tensorboard": _to_tensorboard, "wandb": _to_wandb}
    with tempfile.TemporaryDirectory(prefix="ratchet-track-") as tmp:
        with connect(db, read_only=True) as con:
            records = round_records(con, campaign)
            plot = write_pass1_plot(con, campaign, Path(tmp) / PLOT_NAME)
        report = Path(write_report(db, Path(tmp) / "report.html", campaign)["path"])  # it opens the store itself
        artifacts = [p for p in (report, plot) if p is not None]
        return {name: writers[name](uri, experiment or campaign, records, artifacts) for name, uri in sinks.items()}


def _need(module: str, package: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise TrackingError(f"the {package} sink needs `{package}`: pip install 'ratchet[tracking]'") from None


def quiet_mlflow() -> None:
    """Import MLflow with its INFO lines (creating and migrating a sqlite database) kept off the terminal: warnings and
    errors still show.

    Raises:
        TrackingError: mlflow is not installed.
    """
    _need("mlflow", "mlflow-skinny")
    for name in ("mlflow", "alembic"):
        if logging.getLogger(name).getEffectiveLevel() < logging.WARNING:
            logging.getLogger(name).setLevel(logging.WARNING)


def mlflow_name(name: str) -> str:
    """A metric name as MLflow accepts it (alphanumerics, ``_ - . : /`` and spaces): ``pass@1`` -> ``pass_at_1``."""
    return re.sub(r"[^\w\-.:/ ]", "_", name.replace("@", "_at_"))


def mlflow_experiment(client, uri: str, experiment: str) -> str:
    """The id of MLflow ``experiment`` on ``client`` (created when missing; with a ``sqlite:///`` URI its artifacts go
    to ``mlflow-artifacts/`` beside the database file, not under the working directory).

    Raises:
        MlflowException: as MLflow's client does.
    """
    exp = client.get_experiment_by_name(experiment)
    if exp is not None:
        return exp.experiment_id
    where = None
    if uri.startswith("sqlite:///"):
        where = (Path(uri[len("sqlite:///") :]).resolve().parent / "mlflow-artifacts").as_uri()
    return client.create_experiment(experiment, artifact_location=where)


def _to_mlflow(uri: str, experiment: str, records: list[RoundRecord], artifacts: list[Path]) -> tuple[int, int]:
    """One MLflow run per round (named ``<campaign>-round-<n>``, tagged ``ratchet.round_id``) in ``experiment``."""
    if uri.startswith("file:"):  # MLflow 3 keeps its file store in maintenance mode behind this switch
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    quiet_mlflow()
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.exceptions import MlflowException

    try:
        client = MlflowClient(tracking_uri=uri)
        exp_id = mlflow_experiment(client, uri, experiment)
        held = {}
        for run in client.search_runs([exp_id], max_results=50_000):
            rid = run.data.tags.get("ratchet.round_id")
            if rid and run.info.status == "FINISHED":
                held[rid] = run
            elif rid:  # a run cut short while being written: write it again
                client.delete_run(run.info.run_id)
        new = [r for r in records if r.round_id not in held]
        for rec in new:
            name = f"{rec.tags['ratchet.campaign']}-round-{rec.round_index}"
            run = client.create_run(exp_id, run_name=name, start_time=rec.finished_at_ms)
            rid = run.info.run_id
            params = [Param(mlflow_name(k), v) for k, v in sorted(rec.params.items())]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
                client.log_batch(rid, params=params[i : i + 100])
            metrics = [Metric(mlflow_name(k), v, rec.finished_at_ms, rec.round_index) for k, v in rec.metrics.items()]
            client.log_batch(rid, metrics=metrics, tags=[RunTag(k, v) for k, v in rec.tags.items()])
            for path in artifacts:
                client.log_artifact(rid, str(path), artifact_path="report")
            client.set_terminated(rid, end_time=rec.finished_at_ms)
    except MlflowException as e:
        raise TrackingError(f"MLflow at {uri}: {str(e).splitlines()[0]}") from None
    return len(new), len(records) - len(new)


def _to_tensorboard(logdir: str, experiment: str, records: list[RoundRecord], artifacts: list[Path]) -> tuple[int, int]:
    """Scalars per round (step = round index) under ``<logdir>/<experiment>``; the params and tags as text."""
    _need("tensorboard", "tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    folder = Path(logdir) / experiment
    held: set[int] = set()
    if folder.is_dir():
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        if _DONE_TAG in acc.Tags().get("scalars", []):
            held = {e.step for e in acc.Scalars(_DONE_TAG)}
    new = [r for r in records if r.round_index not in held]
    if not new:
        return 0, len(records)
    try:
        writer = SummaryWriter(log_dir=str(folder))
    except OSError as e:
        raise TrackingError(f"TensorBoard log dir {folder}: {e}") from None
    try:
        for rec in new:
            wall = rec.finished_at_ms / 1000
            writer.add_text("ratchet/round", _markdown(rec), rec.round_index, walltime=wall)
            for k, v in rec.metrics.items():
                if k != _DONE_TAG:
                    writer.add_scalar(k, v, rec.round_index, walltime=wall)
            writer.add_scalar(_DONE_TAG, rec.metrics[_DONE_TAG], rec.round_index, walltime=wall)
    finally:
        writer.close()
    return len(new), len(records) - len(new)


def _markdown(rec: RoundRecord) -> str:
    lines = ["| tag | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rec.tags.items())]
    lines += ["", "| param | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in sorted(rec.params.items()))]
    return "\n".join(lines)


def _to_wandb(folder: str, experiment: str, records: list[RoundRecord], artifacts: list[Path]) -> tuple[int, int]:
    """One offline W&B run per round under ``folder`` (``wandb sync`` uploads them later); which rounds a folder
    holds is kept in ``<folder>/ratchet-tracked.json`` (offline runs cannot be queried)."""
    wandb = _need("wandb", "wandb")
    marker = Path(folder) / "ratchet-tracked.json"
    held = set(json.loads(marker.read_text())) if marker.is_file() else set()
    new = [r for r in records if r.round_id not in held]
    Path(folder).mkdir(parents=True, exist_ok=True)
    for rec in new:
        run = wandb.init(
            project=experiment,
            name=f"{rec.tags['ratchet.campaign']}-round-{rec.round_index}",
            dir=folder,
            mode="offline",
            config=rec.params,
            tags=[rec.tags["ratchet.decision"]],
            reinit="create_new",
        )
        run.summary.update(rec.tags)
        run.log(rec.metrics, step=rec.round_index)
        for path in artifacts:
            run.save(str(path), base_path=str(path.parent), policy="now")
        run.finish()
        held.add(rec.round_id)
        atomic_write_text(marker, json.dumps(sorted(held)))  # a private temporary and a rename: never through a link
    return len(new), len(records) - len(new)
