"""`ratchet sweep` on the tiny model: 4 KL values x 1 G -> 4 one-round GRPO campaigns and a comparison."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.loop.config import load_config
from ratchet.loop.config.template import toml_value
from ratchet.store.db import query


def write_base(tmp_path, model_dir):
    """The tiny one-round GRPO campaign as a TOML file (jsonl sums whose gold is 7 sometimes: see tiny_model_dir)."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "\n".join(json.dumps({"question": f"What is {a} + {b}?", "answer": str(a + b)}) for a in range(1, 9) for b in range(1, 9))
    )
    cfg = load_config(
        None,
        **{
            "db": str(tmp_path / "s.duckdb"), "campaign": "kl", "algorithm": "grpo", "max_rounds": 1,
            "model.name_or_path": str(model_dir), "tasks.source": "jsonl", "tasks.path": str(tasks),
            "tasks.heldout_fraction": 0.3, "tasks.fewshot": 0, "tasks.system_prompt": "sys",
            "tasks.train_prompts_per_round": 4, "tasks.heldout_prompts": 4,
            "generation.group_size": 2, "generation.max_new_tokens": 6, "generation.temperature": 0.7,
            "grpo.dynamic_sampling": False, "grpo.mini_batch_size": 8, "grpo.micro_batch_size": 8, "grpo.lr": 1e-4,
        },
    )  # fmt: skip
    data = cfg.model_dump(mode="json")
    lines = [f"{k} = {toml_value(v)}" for k, v in data.items() if not isinstance(v, dict) and v is not None]
    for section, body in data.items():
        if isinstance(body, dict):
            lines += [f"[{section}]", *(f"{k} = {toml_value(v)}" for k, v in body.items() if v is not None)]
    path = tmp_path / "base.toml"
    path.write_text("\n".join(lines) + "\n")
    return cfg, path


@pytest.mark.slow
def test_sweep_runs_one_campaign_per_point_and_compares(prefect_harness, tiny_model_dir, tmp_path):
    cfg, base = write_base(tmp_path, tiny_model_dir)
    out = tmp_path / "cmp"
    grid = ["--grid", "grpo.beta=0.001,0.003,0.01,0.03", "--grid", "generation.group_size=2"]
    r = CliRunner().invoke(app, ["sweep", "--config", str(base), *grid, "--out", str(out)])
    assert r.exit_code == 0, r.output
    names = ["kl-beta0.001-g2", "kl-beta0.003-g2", "kl-beta0.01-g2", "kl-beta0.03-g2"]
    rounds = query(cfg.db, "SELECT c.name, count(*) FROM rounds r JOIN campaigns c USING (campaign_id) GROUP BY ALL ORDER BY 1")[
        1
    ]
    assert rounds == [(n, 1) for n in sorted(names)]
    betas = query(cfg.db, "SELECT name, json_extract(config_json, '$.grpo.beta')::DOUBLE FROM campaigns ORDER BY 2")[1]
    assert betas == list(zip(names, [0.001, 0.003, 0.01, 0.03]))
    doc = json.loads((out / "sweep.json").read_text())
    assert [p["campaign"] for p in doc["points"]] == names and doc["grid"] == ["grpo.beta", "generation.group_size"]
    assert all(p["status"] == "completed" and p["rounds_done"] == 1 for p in doc["points"])
    assert all(p["final_pass1"] is not None and p["reward_mean"] is not None and p["kl_mean"] is not None for p in doc["points"])
    assert (out / "sweep.csv").read_text().splitlines()[0].startswith("grpo.beta,generation.group_size,campaign,status")
    assert (out / "sweep.md").read_text().count("| kl-beta") == 4
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Re-running the sweep resumes: nothing new is run.
    r = CliRunner().invoke(app, ["sweep", "--config", str(base), *grid, "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert query(cfg.db, "SELECT count(*) FROM rounds")[1][0][0] == 4


def test_bad_grid_fails_in_one_line_before_any_run(tmp_path):
    base = tmp_path / "b.toml"
    base.write_text('algorithm = "grpo"\n')
    r = CliRunner().invoke(app, ["sweep", "--config", str(base), "--grid", "grpo.betta=0.1"])
    assert r.exit_code == 2 and "'betta' is not a key of [grpo]" in r.output
    r = CliRunner().invoke(app, ["sweep", "--config", str(base), "--grid", "grpo.beta"])
    assert r.exit_code == 2 and "is not KEY=V1,V2" in r.output


def test_comparison_files_from_rows(tmp_path):
    from ratchet.flows.report.sweep_report import write_comparison

    rows = [
        {"grpo.beta": b, "generation.group_size": g, "campaign": f"c-{b}-{g}", "status": "completed", "final_pass1": b * 10,
         "kl_mean": b / 2, "reward_mean": 0.5, "rounds_done": 1}
        for b in (0.001, 0.01) for g in (4, 8)
    ] + [{"grpo.beta": 0.1, "generation.group_size": 4, "campaign": "c-x", "status": "failed: boom"}]  # fmt: skip
    paths = write_comparison(rows, ["grpo.beta", "generation.group_size"], tmp_path)
    md = paths["md"].read_text().splitlines()
    assert md[0].startswith("| grpo.beta | generation.group_size | campaign | status |") and len(md) == 2 + 5
    assert "| 0.1 | 4 | c-x | failed: boom | — |" in paths["md"].read_text()
    assert json.loads(paths["json"].read_text())["points"][4]["status"] == "failed: boom"
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"
