"""The worked examples of docs/own-task.md: their task files pass their own verifiers and their configs load (the
verifier imported from the example's folder, the environment resolved), as the page tells a newcomer to check first."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"
runner = CliRunner()


@pytest.mark.parametrize("name, verifier", [("json-extract", "verify_json:verify"), ("python-tool", "math")])
def test_an_examples_tasks_pass_its_verifier_and_its_config_loads(name, verifier, monkeypatch):
    from ratchet.loop.config import load_config
    from ratchet.loop.environments import load_environment

    folder = EXAMPLES / name
    monkeypatch.chdir(folder)  # the page's commands run from the example's folder
    r = runner.invoke(app, ["tasks", "check", "tasks.jsonl", "--format", "records", "--verifier", verifier])
    assert r.exit_code == 0 and "240/240 passed, 0 failed, 0 errors" in r.output, r.output
    cfg = load_config(folder / "ratchet.toml")
    (src,) = cfg.tasks.sources
    assert src.format == "records" and src.verifier == verifier and Path(src.plugin_dir) == folder
    if src.environment:
        assert load_environment(src.environment, src.plugin_dir).name.startswith("plugin:python")
