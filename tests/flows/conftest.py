"""One real tiny campaign shared by the model-export, file-mode and tracking tests (one round, ~1-2 min)."""

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.flows.rounds.test_round import write_sum_tasks


@dataclass(frozen=True)
class TrackedCampaign:
    db: Path
    started: float  # time.time() before the campaign ran
    mlflow_uri: str  # [tracking] mlflow: a local file: store
    tensorboard_dir: Path  # [tracking] tensorboard
    cwd: Path  # the working directory the campaign ran in (MLflow must write nothing there)


@pytest.fixture(scope="session")
def tracked_campaign(prefect_harness, tiny_model_dir, tmp_path_factory) -> TrackedCampaign:
    """Campaign 'tracked' (not 'tiny': Prefect artifact keys are per campaign name, and test_round's 'tiny' reads its
    own): one round of the tiny model whose gate promoted its candidate (margin 1: any candidate passes), run with
    the default `[service] file_mode` under umask 022 and `[tracking]` MLflow and TensorBoard, `[publish]` an MLflow registered model."""
    from ratchet.flows.rounds.campaign import run_campaign
    from ratchet.loop.campaign.round_context import save_config
    from ratchet.loop.config import load_config

    tmp = tmp_path_factory.mktemp("tracked")
    tracked = TrackedCampaign(tmp / "r.duckdb", time.time(), (tmp / "mlruns").as_uri(), tmp / "tb", tmp / "cwd")
    tracked.cwd.mkdir()
    cfg = load_config(
        None,
        **{
            "db": str(tracked.db),
            "campaign": "tracked",
            "max_rounds": 1,
            "model.name_or_path": str(tiny_model_dir),
            "tasks.source": "jsonl",
            "tasks.path": str(write_sum_tasks(tmp)),
            "tasks.heldout_fraction": 0.3,
            "tasks.fewshot": 0,
            "tasks.system_prompt": "sys",
            "tasks.train_prompts_per_round": 12,
            "tasks.heldout_prompts": 10,
            "generation.group_size": 2,
            "generation.max_new_tokens": 6,
            "sft.epochs": 1,
            "sft.lr": 1e-4,
            "gate.margin": 1.0,
            "gate.max_no_answer_rate": 1.0,
            "tracking.mlflow": tracked.mlflow_uri,
            "tracking.tensorboard": str(tracked.tensorboard_dir),
            "publish.mlflow_model": "tracked-model",  # the promoted checkpoint registered (test_registry.py)
        },
    )
    umask, cwd = os.umask(0o022), os.getcwd()  # umask: the usual default; the flow's [service] file_mode must tighten it
    os.chdir(tracked.cwd)
    try:
        decisions = run_campaign(save_config(cfg))
        assert os.umask(0o022) == 0o022  # restored when the flow ends
    finally:
        os.umask(umask)
        os.chdir(cwd)
    assert [d["decision"] for d in decisions] == ["promote"], decisions
    return tracked
