"""`ratchet init --recipe r1`: the file loads and passes preflight as written; shrunk, `ratchet run` runs its phases."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.loop.config import load_config
from ratchet.store.db import connect, query
from ratchet.store.read.reports import phase_rounds

runner = CliRunner()


def init_r1(path) -> str:
    r = runner.invoke(app, ["init", "--recipe", "r1", "--path", str(path)])
    assert r.exit_code == 0, r.output
    return path.read_text()


def test_r1_recipe_loads_and_passes_preflight_as_written(tmp_path, monkeypatch, smollm2_dir):
    from ratchet.flows.rounds.campaign import preflight

    monkeypatch.chdir(tmp_path)  # db = "ratchet.duckdb" as written: here
    text = init_r1(tmp_path / "r1.toml")
    assert text.splitlines().count("[[phases]]") == 4 and "# Phase 1, cold start" in text
    cfg = load_config(tmp_path / "r1.toml")
    assert [(s.name, s.algorithm) for s in cfg.phases] == [
        ("cold-start", "sft"),
        ("reasoning-rl", "grpo"),
        ("rejection-sft", "rft"),
        ("all-scenarios", "grpo"),
    ]
    assert cfg.max_rounds == sum(s.rounds for s in cfg.phases)
    assert cfg.for_phase(1).verifier.language_weight > 0 and cfg.for_phase(2).sft.general_ratio > 0
    preflight(cfg)  # raises on any problem; warnings (a small eval set) are fine
    r = runner.invoke(app, ["init", "--recipe", "r2", "--path", str(tmp_path / "x.toml")])
    assert r.exit_code == 2 and "recipes: r1" in r.stderr


def shrink(text: str, **values: object) -> str:
    """Set every ``key = ...`` line of the given keys (top level and phases alike) to the value."""
    for key, value in values.items():
        text, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
        assert n, key
    return text


@pytest.mark.slow
def test_r1_recipe_runs_its_phases_from_the_cli(prefect_harness, tiny_model_dir, tmp_path):
    path = tmp_path / "r1.toml"
    text = shrink(
        init_r1(path),
        db=f'"{tmp_path / "r1.duckdb"}"',
        name_or_path=f'"{tiny_model_dir}"',
        train_prompts_per_round=6,
        heldout_prompts=4,
        fewshot=0,
        max_new_tokens=8,
        group_size=2,
        rounds=1,
        steps_per_round=1,
        epochs=1,
        dynamic_sampling="false",
        max_consecutive_rejections=9,
        max_no_answer_rate=1.0,  # the tiny model's cut-short worked solutions must not halt the campaign
    )
    path.write_text(text.replace("# max_rounds =", "max_rounds = 2"))  # the first two phases (< 4 min on 2 cores)
    r = runner.invoke(app, ["run", "--config", str(path)])
    assert r.exit_code == 0, r.output
    with connect(tmp_path / "r1.duckdb", read_only=True) as con:
        rounds = phase_rounds(con, "r1")
    assert [(x["round_index"], x["stage"], x["algorithm"]) for x in rounds] == [
        (1, "cold-start", "sft"),
        (2, "reasoning-rl", "grpo"),
    ]
    db = tmp_path / "r1.duckdb"
    # The cold start trained on reference solutions, generated no rollouts, and the examples say so.
    sql = """SELECT te.origin, count(*), count(p.solution) FROM training_runs tr JOIN training_examples te USING (training_run_id)
             LEFT JOIN prompts p ON p.prompt_id = te.trajectory_id WHERE tr.round_id LIKE '%-r1' GROUP BY 1"""
    (origin, n, with_solution), *rest = query(db, sql)[1]
    assert not rest and origin == "reference" and n == with_solution > 0
    assert query(db, "SELECT count(*) FROM trajectories WHERE round_id LIKE '%-r1' AND purpose = 'rollout'")[1] == [(0,)]
    # Phase 2 started from what phase 1 left: its candidate if promoted, else the incumbent carried on.
    one, two = rounds[0], rounds[1]
    carried = one["candidate_checkpoint_id"] if one["decision"] == "promote" else one["incumbent_checkpoint_id"]
    assert two["incumbent_checkpoint_id"] == carried
    sql = "SELECT DISTINCT checkpoint_id FROM trajectories WHERE round_id LIKE '%-r2' AND purpose = 'rollout'"
    assert query(db, sql)[1] == [(carried,)]  # its rollouts came from that policy
    sql = "SELECT input_checkpoint_id FROM training_runs WHERE round_id LIKE '%-r2'"
    assert query(db, sql)[1] == [(carried,)]  # and so did its training
    from ratchet.flows.report.render import metrics_rows, report_pages

    page = report_pages(db, "r1")[0]
    assert page["algorithm"].startswith("in phases: cold-start (sft, 1 rounds) -> reasoning-rl (grpo, 1 rounds)")
    assert [r["stage"] for r in page["rounds"]] == ["cold-start", "reasoning-rl"]

    with connect(db, read_only=True) as con:
        round_id = query(db, "SELECT round_id FROM rounds WHERE round_index = 1")[1][0][0]
        assert {"metric": "round/phase", "scope": "[[phases]] entry", "value": "cold-start"} in metrics_rows(con, round_id)


@pytest.mark.slow
def test_teacher_rollouts_and_general_data_in_an_rft_phase(prefect_harness, tiny_model_dir, tmp_path):
    """The teacher (the tiny model, right on golds of 7) generates; the random base it was made from trains."""
    from ratchet.flows.rounds.campaign import preflight, run_campaign
    from ratchet.loop.campaign.round_context import save_config
    from ratchet.loop.checkpoints import read_checkpoint_id
    from ratchet.loop.tasks.demo import data_path
    from ratchet.loop.tasks.supervised import general_count

    tasks = tmp_path / "t.jsonl"
    recs = [{"question": f"What is {i} + {7 - i}? (variant {k})", "answer": "7"} for i in range(1, 7) for k in range(8)]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in recs))
    base, teacher = tiny_model_dir.parent / "init", tiny_model_dir  # see tests/conftest.py tiny_model_dir
    phase = {
        "name": "distill",
        "algorithm": "rft",
        "generation": {"teacher": str(teacher)},
        "sft": {"general_data": str(data_path("general_sft.jsonl")), "general_ratio": 0.5},
    }
    cfg = load_config(
        None,
        **{
            "db": str(tmp_path / "d.duckdb"), "campaign": "distill", "model.name_or_path": str(base),
            "tasks.source": "jsonl", "tasks.path": str(tasks), "tasks.fewshot": 0, "tasks.system_prompt": "sys",
            "tasks.train_prompts_per_round": 8, "tasks.heldout_prompts": 4, "tasks.heldout_fraction": 0.3,
            "generation.group_size": 2, "generation.max_new_tokens": 6, "sft.epochs": 1, "phases": [phase],
        },
    )  # fmt: skip
    preflight(cfg)
    run_campaign(save_config(cfg))
    db, teacher_id, base_id = cfg.db, read_checkpoint_id(teacher), read_checkpoint_id(base)
    assert query(db, "SELECT DISTINCT checkpoint_id FROM trajectories WHERE purpose = 'rollout'")[1] == [(teacher_id,)]
    assert query(db, "SELECT model_ref, parent_id FROM checkpoints WHERE checkpoint_id = ?", [teacher_id])[1] == [
        (str(teacher), None)
    ]
    assert query(db, "SELECT input_checkpoint_id, algorithm FROM training_runs")[1] == [(base_id, "rft")]  # the incumbent trains
    assert query(db, "SELECT r.incumbent_checkpoint_id, r.stage FROM rounds r JOIN gate_decisions USING (round_id)")[1] == [
        (base_id, "distill")
    ]
    origins = dict(query(db, "SELECT origin, count(*) FROM training_examples GROUP BY 1")[1])
    assert origins["rollout"] > 0 and origins["general"] == min(16, general_count(origins["rollout"], 0.5))
