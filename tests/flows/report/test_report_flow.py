"""The round's UI artifacts and `ratchet report` on a store made by the real round flow (tiny model, GRPO): slow."""

import base64
import json
import re

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.loop.campaign.round_context import load_ctx, save_config
from ratchet.loop.config import load_config
from ratchet.store.db import query, transaction
from ratchet.store.queries import set_round_status
from tests.flows.report.test_report import images, page_text
from tests.flows.rounds.test_round import write_sum_tasks

pytestmark = pytest.mark.slow


def tiny_config_file(tmp, model_dir, campaign="tiny-grpo", **extra):
    """A one-round campaign of the tiny model on sums (the settings of tests/flows/rounds/test_round.py; GRPO unless overridden)."""
    tasks = write_sum_tasks(tmp)
    cfg = load_config(
        None,
        **{
            "db": str(tmp / "r.duckdb"),
            "campaign": campaign,
            "max_rounds": 1,
            "algorithm": "grpo",
            "model.name_or_path": str(model_dir),
            "tasks.source": "jsonl",
            "tasks.path": str(tasks),
            "tasks.heldout_fraction": 0.3,
            "tasks.fewshot": 0,
            "tasks.system_prompt": "sys",
            "tasks.train_prompts_per_round": 12,
            "tasks.heldout_prompts": 10,
            "generation.group_size": 2,
            "generation.max_new_tokens": 6,
            "generation.temperature": 0.7,
            "eval.num_samples": 2,
            "eval.ks": [1, 2],
            "gate.max_consecutive_rejections": 3,
            "grpo.dynamic_sampling": False,
            "grpo.mini_batch_size": 12,
            "grpo.micro_batch_size": 6,
            "grpo.lr": 1e-4,
            **extra,
        },
    )
    return save_config(cfg)


def test_real_round_publishes_metrics_plot_progress_and_reports(prefect_harness, tiny_model_dir, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, ArtifactFilterType

    from ratchet.flows.rounds.campaign import run_campaign, start_round

    cfg = tiny_config_file(tmp_path, tiny_model_dir)
    run_campaign(cfg)
    ctx = load_ctx(cfg, 1)
    png = ctx.campaign_dir / "round-1" / "report" / "heldout_pass1.png"
    assert png.read_bytes().startswith(b"\x89PNG")
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["tiny-grpo-round-1-gate", "tiny-grpo-round-1-metrics"]))
        )
        progress = client.read_artifacts(artifact_filter=ArtifactFilter(type=ArtifactFilterType(any_=["progress"])))
    by_key = {a.key: a.data for a in arts}
    gate_md = by_key["tiny-grpo-round-1-gate"]
    embedded = re.search(r"\(data:image/png;base64,([A-Za-z0-9+/=]+)\)", gate_md)
    assert embedded and base64.b64decode(embedded.group(1)) == png.read_bytes() and str(png) in gate_md
    metrics = by_key["tiny-grpo-round-1-metrics"]
    metrics = json.loads(metrics) if isinstance(metrics, str) else metrics
    value = {(m["metric"], m["scope"].split(" ")[0]): m["value"] for m in metrics}
    ((kl,),) = query(
        ctx.db, "SELECT metrics_json FROM training_runs WHERE round_id = ? ORDER BY finished_at DESC LIMIT 1", [ctx.round_id]
    )[1]  # the last on-policy step's (grpo.steps_per_round)
    assert value[("train/kl", "training")] == pytest.approx(json.loads(kl)["train/kl/mean"], abs=1e-4)
    ((inc,),) = query(ctx.db, "SELECT incumbent_pass1 FROM gate_decisions WHERE round_id = ?", [ctx.round_id])[1]
    assert value[("heldout/pass@1", "incumbent")] == pytest.approx(inc, abs=1e-4)
    for m in (
        "rollout/pass@1",
        "rollout/pass@2",
        "rollout/reasons",
        "rollout/completion_tokens_p90",
        "rollout/format_error_rate",
        "heldout/completion_tokens_p90",
    ):
        assert (m, "rollouts," if m.startswith("rollout") else "incumbent") in value, m
    # Generation and training kept a progress artifact each (per on-policy step), all finished at 100 %.
    done = {a.description: a.data for a in progress}
    steps = ctx.steps
    suffix = [f" (step {k}/{steps})" for k in range(1, steps + 1)] if steps > 1 else [""]
    assert {f"round 1: {what}{s}" for what in ("rollouts", "grpo") for s in suffix} <= set(done), done
    assert all(v == 100.0 for v in done.values()), done
    # A second round that failed after it started; the report shows both, with the plot inline.
    start_round.fn(str(cfg), 2)
    with transaction(ctx.db) as con:
        set_round_status(con, load_ctx(cfg, 2).round_id, "failed")
    out = tmp_path / "report.html"
    r = CliRunner().invoke(app, ["report", "--db", str(ctx.db), "--out", str(out)])
    assert r.exit_code == 0 and "1 campaign(s), 2 round(s)" in r.stdout
    page = out.read_text()
    text = page_text(page)
    ((decision, reason),) = query(ctx.db, "SELECT decision, reason FROM gate_decisions")[1]
    assert f"Round 1 (completed, {decision})" in text and reason in text and "Round 2 (failed)" in text
    # the pass@1 plot and, since the gate measures drift from the base each round, the drift curve
    assert len(images(page)) == 2 and "train/kl" in text
    assert 'alt="held-out pass@1 across rounds of' in page and 'alt="drift from the base across rounds of' in page
