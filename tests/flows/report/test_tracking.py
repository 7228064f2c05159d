"""Tracking sinks: the tiny campaign's `[tracking]` MLflow and TensorBoard runs equal the store; `ratchet track`
back-fills a sink that lacks the rounds, and a re-run writes nothing twice."""

import json

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.flows.report.tracking import mlflow_name
from ratchet.store.db import query

pytest.importorskip("mlflow", reason="the tracking extra: pip install -e '.[tracking]'")
pytest.importorskip("tensorboard", reason="the tracking extra: pip install -e '.[tracking]'")


def store_metrics(db) -> dict[str, float]:
    """Round 1's metrics as the store holds them (written here from SQL, not by the tracking code)."""
    (cand, inc, cand_p, inc_p, promoted, metrics_json), *_ = query(
        db,
        """SELECT g.candidate_checkpoint_id, g.incumbent_checkpoint_id, g.candidate_pass1, g.incumbent_pass1,
                  g.decision = 'promote', tr.metrics_json
           FROM gate_decisions g JOIN training_runs tr USING (round_id)""",
    )[1]
    out = {"gate/candidate_pass1": cand_p, "gate/incumbent_pass1": inc_p, "gate/promoted": float(promoted)}
    for ckpt, prefix in ((cand, ""), (inc, "incumbent/")):
        for metric, value in query(db, f"SELECT metric, value FROM evaluations WHERE checkpoint_id = '{ckpt}'")[1]:
            out[prefix + metric] = value
    out |= {k: float(v) for k, v in json.loads(metrics_json).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    (rollout_pass1,), *_ = query(
        db,
        """SELECT avg(v.correct::INT) FROM trajectories t JOIN verdicts v USING (trajectory_id)
           WHERE t.purpose = 'rollout'""",
    )[1]
    out["rollout/pass@1"] = rollout_pass1
    return out


def mlflow_runs(uri: str, experiment: str = "tracked"):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    return client, client.search_runs([exp.experiment_id])


def tensorboard_scalars(folder) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def assert_has(logged: dict[str, float], expected: dict[str, float], name=lambda k: k):
    for key, value in expected.items():
        assert logged[name(key)] == pytest.approx(value, rel=1e-6, abs=1e-6), key


def test_campaign_writes_mlflow_and_tensorboard_runs_equal_to_the_store(tracked_campaign):
    db, expected = tracked_campaign.db, store_metrics(tracked_campaign.db)
    client, runs = mlflow_runs(tracked_campaign.mlflow_uri)
    assert len(runs) == 1
    run = runs[0]
    cand = query(db, "SELECT candidate_checkpoint_id FROM gate_decisions")[1][0][0]
    assert run.info.run_name == "tracked-round-1" and run.info.status == "FINISHED"
    assert run.data.tags["ratchet.candidate_checkpoint_id"] == cand and run.data.tags["ratchet.decision"] == "promote"
    assert run.data.params["gate.margin"] == "1.0" and run.data.params["max_rounds"] == "1"
    assert_has(run.data.metrics, expected, mlflow_name)
    assert {f.path for f in client.list_artifacts(run.info.run_id, "report")} >= {"report/report.html"}

    scalars = tensorboard_scalars(tracked_campaign.tensorboard_dir / "tracked")
    assert all(len(points) == 1 and points[0][0] == 1 for points in scalars.values())  # one point per metric, step 1
    assert_has({k: v[0][1] for k, v in scalars.items()}, expected)


def test_track_back_fills_a_new_sink_and_writes_nothing_twice(tracked_campaign, tmp_path):
    db, runner = str(tracked_campaign.db), CliRunner()
    sinks = {"mlflow": f"sqlite:///{tmp_path / 'mlflow.db'}", "tensorboard": str(tmp_path / "tb")}
    for to, uri in sinks.items():
        args = ["track", "--db", db, "--campaign", "tracked", "--to", to, "--uri", uri]
        first, again = runner.invoke(app, args), runner.invoke(app, args)
        assert first.exit_code == 0 and "1 round(s) written, 0 already there" in first.output, first.output
        assert again.exit_code == 0 and "0 round(s) written, 1 already there" in again.output, again.output
    expected = store_metrics(tracked_campaign.db)
    _, runs = mlflow_runs(sinks["mlflow"])
    assert len(runs) == 1 and (tmp_path / "mlflow-artifacts").is_dir()  # artifacts beside the database
    assert_has(runs[0].data.metrics, expected, mlflow_name)
    _, first_runs = mlflow_runs(tracked_campaign.mlflow_uri)
    assert runs[0].data.metrics == first_runs[0].data.metrics  # back-filled = written by the round
    scalars = tensorboard_scalars(tmp_path / "tb" / "tracked")
    assert all(len(points) == 1 for points in scalars.values())
    assert_has({k: v[0][1] for k, v in scalars.items()}, expected)

    r = runner.invoke(app, ["track", "--db", db, "--campaign", "tracked", "--to", "neptune", "--uri", "x"])
    assert r.exit_code == 2 and "mlflow, tensorboard, wandb" in r.output
    r = runner.invoke(app, ["track", "--db", db, "--campaign", "nope", "--to", "tensorboard", "--uri", str(tmp_path / "t")])
    assert r.exit_code == 2 and "no campaign 'nope'" in r.output
