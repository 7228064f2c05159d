"""`ratchet export --what model`: a promoted checkpoint of a real tiny campaign as a Hugging Face folder."""

import pytest
import yaml
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.store.db import query
from tests.store.test_file_modes import modes_outside


def export_model(db: str, *args: str):
    """`ratchet export --what model` of the tracked campaign with ``args`` (``--out``, ``--checkpoint``)."""
    return CliRunner().invoke(app, ["export", "--db", db, "--campaign", "tracked", "--what", "model", *args])


def test_campaign_files_are_private(tracked_campaign):
    """Store, Parquet snapshots, run dir (stage files, checkpoints) and $RATCHET_HOME/cache files the round wrote:
    0600/0700 (the test harness's Prefect database there is Prefect's, started before the flow)."""
    from ratchet.loop.checkpoints import ratchet_home

    db, started = tracked_campaign.db, tracked_campaign.started
    made = [p for p in db.parent.iterdir() if p.name.startswith("r.")]  # the test wrote tasks.jsonl; the sinks have tests
    assert {"r.duckdb", "r.duckdb.store", "r.runs"} <= {p.name for p in made}
    assert any(p.suffix == ".safetensors" for p in (db.parent / "r.runs").rglob("*"))
    for p in made:
        assert modes_outside(p, "private") == []
    home = [p for p in (ratchet_home() / "cache").rglob("*") if p.is_file() and p.stat().st_mtime >= started]
    assert [p for p in home if p.stat().st_mode & 0o077] == []


def test_promoted_model_loads_generates_and_states_its_lineage(tracked_campaign, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    db = str(tracked_campaign.db)
    out = tmp_path / "hf"
    r = export_model(db, "--out", str(out))
    assert r.exit_code == 0, r.output
    (cand, base, pass1, n), *_ = query(
        db,
        """SELECT g.candidate_checkpoint_id, c.base_checkpoint_id, e.value, e.num_prompts FROM gate_decisions g
           JOIN campaigns c USING (campaign_id) JOIN evaluations e ON e.checkpoint_id = g.candidate_checkpoint_id
           WHERE e.metric = 'heldout/pass@1'""",
    )[1]
    assert f"checkpoint {cand}" in r.output
    assert not (out / "ratchet_manifest.json").exists() and (out / "generation_config.json").is_file()

    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    ids = tok("What is 3 + 4?", return_tensors="pt").input_ids
    with torch.no_grad():
        gen = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert gen.shape[1] > ids.shape[1]  # it generated tokens

    card = (out / "README.md").read_text()
    front = yaml.safe_load(card.split("---\n")[1])  # the Hub reads the YAML between the first two '---' lines
    assert front["library_name"] == "transformers" and "base_model" not in front  # a local base has no Hub id
    metric = front["model-index"][0]["results"][0]["metrics"][0]
    assert metric["type"] == "pass@1" and metric["value"] == pytest.approx(pass1, abs=1e-4)
    body = card.split("---\n", 2)[2]
    assert base in body and "Promoted by the gate in:** round 1" in body and f"on {n} held-out prompts" in body
    algorithm, examples = query(db, "SELECT algorithm, num_examples FROM training_runs")[1][0]
    assert (
        f"| 1 | {algorithm} | {examples} | jsonl ({examples}) |" in body
    )  # tasks.source = "jsonl" is read as a source named jsonl and "| 1 | promote |" in body


def test_export_by_id_and_refusals(tracked_campaign, tmp_path):
    db = str(tracked_campaign.db)
    base = query(db, "SELECT base_checkpoint_id FROM campaigns")[1][0][0]
    r = export_model(db, "--checkpoint", base[:8], "--out", str(tmp_path / "b"))
    assert r.exit_code == 0, r.output
    card = (tmp_path / "b" / "README.md").read_text()
    assert "Promoted by the gate in:** never" in card  # the base: never promoted
    refusals = {
        "inside the store": str(tracked_campaign.db.parent / "r.duckdb.store" / "model"),
        "exists": str(tmp_path / "b"),
    }
    for msg, path in refusals.items():
        r = export_model(db, "--out", path)
        assert r.exit_code == 2 and msg in r.output, (msg, r.output)
    r = export_model(db, "--checkpoint", "zzzzzzzz", "--out", str(tmp_path / "c"))
    assert r.exit_code == 2 and "matches 0 checkpoints" in r.output
