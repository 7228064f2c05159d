"""`ratchet export --what model`: a promoted checkpoint of a real tiny campaign as a Hugging Face folder."""

import pytest
import yaml
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.store.db import query
from tests.flows.test_round import write_sum_tasks


@pytest.fixture(scope="module")
def promoted_store(prefect_harness, tiny_model_dir, tmp_path_factory):
    """A store with one round of the tiny model whose gate promoted its candidate (margin 1: any candidate passes)."""
    from ratchet.flows.rounds.campaign import run_campaign
    from ratchet.loop.campaign.context import save_config
    from ratchet.loop.config import load_config

    tmp = tmp_path_factory.mktemp("model-export")
    cfg = load_config(
        None,
        **{
            "db": str(tmp / "r.duckdb"),
            "campaign": "tiny",
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
        },
    )
    decisions = run_campaign(save_config(cfg))
    assert [d["decision"] for d in decisions] == ["promote"], decisions
    return tmp / "r.duckdb"


def test_promoted_model_loads_generates_and_states_its_lineage(promoted_store, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    db = str(promoted_store)
    out = tmp_path / "hf"
    r = CliRunner().invoke(app, ["export", "--db", db, "--campaign", "tiny", "--what", "model", "--out", str(out)])
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
    assert f"| 1 | {algorithm} | {examples} | jsonl:tasks.jsonl ({examples}) |" in body and "| 1 | promote |" in body


def test_export_by_id_and_refusals(promoted_store, tmp_path):
    db = str(promoted_store)
    runner = CliRunner()
    base = query(db, "SELECT base_checkpoint_id FROM campaigns")[1][0][0]
    r = runner.invoke(
        app,
        ["export", "--db", db, "--campaign", "tiny", "--what", "model", "--checkpoint", base[:8], "--out", str(tmp_path / "b")],
    )
    assert r.exit_code == 0, r.output
    card = (tmp_path / "b" / "README.md").read_text()
    assert "Promoted by the gate in:** never" in card  # the base: never promoted
    refusals = {
        "inside the store": str(promoted_store.parent / "r.duckdb.store" / "model"),
        "exists": str(tmp_path / "b"),
    }
    for msg, path in refusals.items():
        r = runner.invoke(app, ["export", "--db", db, "--campaign", "tiny", "--what", "model", "--out", path])
        assert r.exit_code == 2 and msg in r.output, (msg, r.output)
    r = runner.invoke(
        app,
        ["export", "--db", db, "--campaign", "tiny", "--what", "model", "--checkpoint", "zzzzzzzz", "--out", str(tmp_path / "c")],
    )
    assert r.exit_code == 2 and "matches 0 checkpoints" in r.output
