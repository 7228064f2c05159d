"""Publishing what was promoted: a checkpoint as a version of an MLflow registered model, or a Hugging Face Hub push.

``[publish] mlflow_model = "NAME"`` registers every checkpoint the gate promotes (after the round's gate, beside the
tracking sinks; ``ratchet publish --checkpoint ID`` does it by hand): one MLflow run ``publish <id>`` in the experiment
``<tracking experiment>-published`` (the rounds' own runs stay alone in theirs) logs the checkpoint's folder (weights, config, tokenizer, the model card of ``ratchet export --what model``)
as its ``model`` artifacts, and a new version of NAME points at them, tagged with the model card's metrics and the
lineage (``ratchet.checkpoint_id``, campaign, base, promoting round, held-out pass@1 and its prompt count, the
training runs). A version already tagged with the checkpoint's id is kept, never registered twice (a resumed round,
a second ``ratchet publish``).

``[publish] hf_repo = "org/name"`` pushes the same folder to the Hub (``huggingface_hub.upload_folder``, one commit per
checkpoint); without a token, with ``HF_HUB_OFFLINE`` set or with the Hub unreachable it is refused in one line
(``PublishError``), and nothing else is affected.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from ratchet.flows.compute.resolve import verified_checkpoint_dir
from ratchet.flows.report.tracking import TrackingError, mlflow_experiment, quiet_mlflow
from ratchet.loop.checkpoints import MANIFEST, hub_model_id
from ratchet.store.db import connect
from ratchet.store.read.model_card import ModelLineage, model_card, model_lineage

CHECKPOINT_TAG = "ratchet.checkpoint_id"


class PublishError(RuntimeError):
    """A registry cannot take the checkpoint (no package, URI, token or network); the message says which and the fix."""


def lineage_tags(lineage: ModelLineage) -> dict[str, str]:
    """The model card's metrics and the lineage as string tags (MLflow model version tags)."""
    tags = {
        CHECKPOINT_TAG: lineage.checkpoint_id,
        "ratchet.campaign": lineage.campaign,
        "ratchet.base_checkpoint_id": lineage.base_checkpoint_id,
        "ratchet.base_model": lineage.base_model_ref,
        "ratchet.promoted_in_round": "" if lineage.promoted_in_round is None else str(lineage.promoted_in_round),
        "heldout/pass_at_1": "" if lineage.heldout_pass1 is None else f"{lineage.heldout_pass1:.4f}",
        "heldout/prompts": "" if lineage.heldout_prompts is None else str(lineage.heldout_prompts),
        "ratchet.training_runs": json.dumps(lineage.training_runs, default=str)[:4000],
    }
    return {k: v for k, v in tags.items() if v != ""}


def _model_folder(src: Path, lineage: ModelLineage, out: Path) -> Path:
    """``src`` (a verified checkpoint folder) copied to ``out`` without Ratchet's manifest, with its model card."""
    shutil.copytree(src, out, ignore=shutil.ignore_patterns(MANIFEST, "README.md"))
    (out / "README.md").write_text(model_card(lineage, hub_model_id(lineage.base_model_ref)))
    return out


def publish_checkpoint(
    db: str | Path, campaign: str, checkpoint: str, *, mlflow_model: str | None, mlflow_uri: str | None,
    hf_repo: str | None = None, experiment: str | None = None,
) -> list[str]:  # fmt: skip
    """Publish ``checkpoint`` (an id, a unique prefix, or ``promoted``) of ``campaign`` to the registries named;
    returns one line per registry saying what was done.

    Raises:
        ValueError: no such campaign or checkpoint. LookupError, ModelError: its weights are gone or changed.
        PublishError: a registry refused it (the others named before it were published).
    """
    with connect(db, read_only=True) as con:
        lineage = model_lineage(con, campaign, checkpoint)
        src = verified_checkpoint_dir(con, lineage.checkpoint_id)  # the files hash to the recorded id
    lines = []
    with tempfile.TemporaryDirectory(prefix="ratchet-publish-") as tmp:
        folder = _model_folder(src, lineage, Path(tmp) / "model")
        if mlflow_model:
            if not mlflow_uri:
                raise PublishError(f"publish.mlflow_model = {mlflow_model!r} needs an MLflow URI: set publish.mlflow")
            lines.append(register_mlflow(folder, lineage, mlflow_model, mlflow_uri, experiment or campaign))
        if hf_repo:
            lines.append(push_hub(folder, lineage, hf_repo))
    return lines


def register_mlflow(folder: Path, lineage: ModelLineage, name: str, uri: str, experiment: str) -> str:
    """A new version of MLflow registered model ``name`` holding ``folder`` (see the module docstring), unless one is
    tagged with the checkpoint's id already; returns the line saying which.

    Raises:
        PublishError: mlflow is not installed, or MLflow refused (its first message line).
    """
    try:
        quiet_mlflow()
    except TrackingError as e:
        raise PublishError(str(e)) from None
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        with _default_tracking_uri(uri):
            return _register(MlflowClient(tracking_uri=uri, registry_uri=uri), folder, lineage, name, uri, experiment)
    except MlflowException as e:
        raise PublishError(f"MLflow at {uri}: {str(e).splitlines()[0]}") from None


@contextmanager
def _default_tracking_uri(uri: str):
    """MLflow's default tracking URI set to ``uri`` while registering: its file-store registry opens a client on the
    default URI when it tags a version (``MlflowClient()`` in ``_get_file_model_version_from_dir``), and MLflow 3's
    default is ``sqlite:///mlflow.db`` in the working directory, which it would create there."""
    old = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = uri
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = old


def _register(client, folder: Path, lineage: ModelLineage, name: str, uri: str, experiment: str) -> str:
    """The body of :func:`register_mlflow` on an open ``client`` (MlflowException passes through)."""
    from mlflow.exceptions import MlflowException

    cid = lineage.checkpoint_id
    try:
        client.get_registered_model(name)
        held = [v for v in client.search_model_versions(f"name = '{name}'") if v.tags.get(CHECKPOINT_TAG) == cid]
    except MlflowException:
        client.create_registered_model(name, description=f"Checkpoints promoted by Ratchet campaign {lineage.campaign}")
        held = []
    if held:
        return f"mlflow {uri}: {name} version {held[0].version} holds checkpoint {cid} already"
    tags = lineage_tags(lineage)
    exp = mlflow_experiment(client, uri, f"{experiment}-published")  # beside the rounds' runs, not among them
    run = client.create_run(exp, run_name=f"publish {cid}", tags=tags)
    rid = run.info.run_id
    client.log_artifacts(rid, str(folder), artifact_path="model")
    client.set_terminated(rid)
    version = client.create_model_version(
        name, source=f"{run.info.artifact_uri}/model", run_id=rid, tags=tags, description=_description(lineage)
    )
    return f"mlflow {uri}: registered checkpoint {cid} as {name} version {version.version}"


def _description(lineage: ModelLineage) -> str:
    score = "" if lineage.heldout_pass1 is None else f", held-out pass@1 {lineage.heldout_pass1:.3f} on {lineage.heldout_prompts}"
    where = "" if lineage.promoted_in_round is None else f" promoted in round {lineage.promoted_in_round}"
    return (
        f"Ratchet campaign {lineage.campaign}: checkpoint {lineage.checkpoint_id}{where}{score} (base {lineage.base_model_ref})"
    )


def push_hub(folder: Path, lineage: ModelLineage, repo: str) -> str:
    """Push ``folder`` to Hub repository ``repo`` (created private when missing), one commit; returns the line.

    Raises:
        PublishError: no ``huggingface_hub``, ``HF_HUB_OFFLINE`` set, no token, or the Hub unreachable or refusing.
    """
    try:
        import huggingface_hub
    except ImportError:
        raise PublishError(f"publish.hf_repo = {repo!r} needs huggingface_hub: pip install huggingface_hub") from None
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        raise PublishError(f"publish.hf_repo = {repo!r}: HF_HUB_OFFLINE is set, so nothing is pushed; unset it to push")
    token = huggingface_hub.get_token()
    if not token:
        raise PublishError(f"publish.hf_repo = {repo!r}: no Hugging Face token (set HF_TOKEN or run `hf auth login`); not pushed")
    api = huggingface_hub.HfApi(token=token)
    try:
        api.create_repo(repo, private=True, exist_ok=True)
        info = api.upload_folder(
            repo_id=repo, folder_path=str(folder), commit_message=f"Ratchet: checkpoint {lineage.checkpoint_id}"
        )
    except Exception as e:  # noqa: BLE001 - network errors, HTTP errors and auth errors all mean: not pushed
        raise PublishError(
            f"publish.hf_repo = {repo!r}: the Hub refused or cannot be reached ({str(e).splitlines()[0][:200]}); not pushed"
        ) from None
    return f"hf {repo}: pushed checkpoint {lineage.checkpoint_id} ({getattr(info, 'commit_url', info)})"
