"""`ratchet tasks check --verifier`, `ratchet init --tasks --verifier`, and `--dry-run` with a records source: its
verifier named and versioned, and a verifier that fails on most pilot samples stopping the run in one line."""

import json

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.loop.config import load_config

runner = CliRunner()

CHECKS = """
def verify(completion, record):
    return completion.strip() == record["reference"]

def boom(completion, record):
    raise RuntimeError("my verifier is broken")
"""


@pytest.fixture()
def own(tmp_path, monkeypatch):
    (tmp_path / "own_checks.py").write_text(CHECKS)
    monkeypatch.chdir(tmp_path)  # `tasks check --verifier module:function` imports from the current folder first
    f = tmp_path / "own.jsonl"
    rows = [{"prompt": f"Say {i}.", "reference": str(i)} for i in range(40)]
    rows += [{"prompt": [{"role": "user", "content": "Say anything."}]}]  # no reference: only loaded
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def test_tasks_check_runs_the_verifier_on_each_reference(own):
    r = runner.invoke(app, ["tasks", "check", str(own), "--format", "records", "--verifier", "own_checks:verify"])
    assert r.exit_code == 0, r.output
    assert "40/41 passed, 0 failed, 0 errors, 1 loaded only (no reference)" in r.stdout
    r = runner.invoke(app, ["tasks", "check", str(own), "--verifier", "own_checks:boom", "--output", "json"])
    assert r.exit_code == 1
    summary = json.loads(r.stdout.splitlines()[-1])
    assert (summary["errors"], summary["loaded"]) == (40, 1)
    assert "verifier_error: RuntimeError: my verifier is broken" in summary["groups"][0]["detail"]


def test_tasks_check_refuses_a_bad_verifier_in_one_line(own):
    r = runner.invoke(app, ["tasks", "check", str(own), "--verifier", "own_checks:nope"])
    assert r.exit_code == 2 and "has no 'nope'" in r.stderr and r.stderr.strip().count("\n") == 0, r.output
    r = runner.invoke(app, ["tasks", "check", str(own), "--format", "records"])
    assert r.exit_code == 2 and "pass --verifier module:function" in r.stderr


def test_init_writes_a_records_source_with_its_verifier(own, tmp_path):
    cfg = tmp_path / "ratchet.toml"
    r = runner.invoke(app, ["init", "--tasks", str(own), "--verifier", "own_checks:verify", "--path", str(cfg)])
    assert r.exit_code == 0, r.output
    (src,) = load_config(cfg).tasks.sources
    assert (src.format, src.verifier, src.plugin_dir) == ("records", "own_checks:verify", str(tmp_path.resolve()))
    r = runner.invoke(app, ["init", "--tasks", str(own), "--verifier", "own_checks:nope", "--path", str(cfg), "--force"])
    assert r.exit_code == 2 and "has no 'nope'" in r.stderr


def test_dry_run_names_the_verifier_and_the_pilot_stops_on_a_broken_one(own, tmp_path, tiny_model_dir):
    cfg = tmp_path / "r.toml"
    base = (
        f'db = "{tmp_path / "r.duckdb"}"\n[model]\nname_or_path = "{tiny_model_dir}"\n'
        "[tasks]\nheldout_prompts = 4\ntrain_prompts_per_round = 8\n"
        "[generation]\nmax_new_tokens = 12\ngroup_size = 2\n[preflight]\npilot_prompts = 2\n"
        '[[tasks.sources]]\npath = "own.jsonl"\nsystem_prompt = "sys"\n'
    )
    cfg.write_text(base.replace("pilot_prompts = 2", "pilot = false") + 'verifier = "own_checks:verify"\n')
    r = runner.invoke(app, ["check", "--config", str(cfg)])
    assert r.exit_code == 0, r.output
    assert "tasks source 'own': verifier plugin:own_checks:verify version 0+" in r.stdout
    cfg.write_text(base + 'verifier = "own_checks:boom"\n')
    r = runner.invoke(app, ["check", "--config", str(cfg)])
    assert r.exit_code == 2, r.output
    last = r.stderr.strip().splitlines()[-1]  # (above it, under CliRunner: Prefect's handler on a closed stream)
    assert "the verifier 'own_checks:boom' of tasks source 'own' failed on 16/16 samples" in last
    assert "RuntimeError: my verifier is broken" in last
    assert not (tmp_path / "r.duckdb").exists()


def test_init_with_several_files_gives_the_verifier_to_the_records_file_only(own, tmp_path):
    from tests.loop.tasks.test_starter import gsm8k_file

    gsm = gsm8k_file(tmp_path / "gsm.jsonl", n=80)
    cfg = tmp_path / "mixed.toml"
    r = runner.invoke(app, ["init", "--tasks", str(gsm), str(own), "--verifier", "own_checks:verify", "--path", str(cfg)])
    assert r.exit_code == 0, r.output
    got = {s.source_name(): (s.format, s.verifier) for s in load_config(cfg).tasks.sources}
    assert got == {"gsm": ("math", None), "own": ("records", "own_checks:verify")}
