"""Publishing what was promoted (issue 42, item 14): the tiny campaign's promoted checkpoint is a version of an MLflow
registered model with its weights and model card as artifacts and its lineage as tags, registered once; `ratchet
publish` does it by hand; a Hub push without a token or network is refused in one line."""

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.store.db import query

pytest.importorskip("mlflow", reason="the tracking extra: pip install -e '.[tracking]'")
runner = CliRunner()


@pytest.fixture(autouse=True)
def _mlflow_default_uri(monkeypatch, tracked_campaign):
    """MLflow's file-store registry opens a client on the default URI when it reads a version (MLflow 3's default:
    sqlite:///mlflow.db in the working directory, created there); the tests' own reads point it at the campaign's."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracked_campaign.mlflow_uri)


def _versions(uri: str, name: str = "tracked-model"):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    return client, client.search_model_versions(f"name = '{name}'")


def test_the_promoted_checkpoint_is_registered_once_with_its_lineage(tracked_campaign, tmp_path):
    (cand, pass1, prompts), *_ = query(
        tracked_campaign.db,
        """SELECT g.candidate_checkpoint_id, g.candidate_pass1, e.num_prompts FROM gate_decisions g
           JOIN evaluations e ON e.checkpoint_id = g.candidate_checkpoint_id AND e.metric = 'heldout/pass@1'""",
    )[1]
    client, (version,) = _versions(tracked_campaign.mlflow_uri)
    assert version.tags["ratchet.checkpoint_id"] == cand and version.tags["ratchet.campaign"] == "tracked"
    assert version.tags["ratchet.promoted_in_round"] == "1" and float(version.tags["heldout/pass_at_1"]) == pytest.approx(
        pass1, abs=1e-4
    )
    assert version.tags["heldout/prompts"] == str(prompts) and "rft" in version.tags["ratchet.training_runs"]
    files = {f.path for f in client.list_artifacts(version.run_id, "model")}
    assert {"model/config.json", "model/README.md", "model/model.safetensors"} <= files
    assert "model/ratchet_manifest.json" not in files  # the registry gets a Hugging Face folder, as `export` writes
    assert not list(tracked_campaign.cwd.iterdir())  # MLflow's default sqlite:///mlflow.db not created in the cwd
    # by hand, again: the version is there already, nothing registered twice
    args = ["publish", "--db", str(tracked_campaign.db), "--campaign", "tracked", "--mlflow-model", "tracked-model"]
    r = runner.invoke(app, [*args, "--mlflow-uri", tracked_campaign.mlflow_uri])
    assert r.exit_code == 0 and f"version 1 holds checkpoint {cand} already" in r.stdout, r.output
    assert len(_versions(tracked_campaign.mlflow_uri)[1]) == 1
    # another registry: a new model, version 1, from the same store
    other = (tmp_path / "reg.db").as_posix()
    r = runner.invoke(app, [*args[:-1], "other-model", "--mlflow-uri", f"sqlite:///{other}", "--checkpoint", cand[:8]])
    assert r.exit_code == 0 and f"registered checkpoint {cand} as other-model version 1" in r.stdout, r.output


def test_a_hub_push_without_a_token_or_network_is_refused_in_one_line(tracked_campaign, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no stored token
    args = ["publish", "--db", str(tracked_campaign.db), "--campaign", "tracked", "--hf-repo", "me/tracked"]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "no Hugging Face token (set HF_TOKEN or run `hf auth login`); not pushed" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.output
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "HF_HUB_OFFLINE is set" in r.stderr
    r = runner.invoke(app, ["publish", "--db", str(tracked_campaign.db), "--campaign", "tracked"])
    assert r.exit_code == 2 and "nothing to publish to" in r.stderr
