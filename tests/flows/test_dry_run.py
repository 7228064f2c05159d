"""`ratchet run --dry-run`: every preflight check, nothing written (issue 24, finding 6)."""

from typer.testing import CliRunner

from ratchet.flows.cli import app
from tests.loop.tasks.test_starter import gsm8k_file

runner = CliRunner()


def test_dry_run_checks_and_writes_nothing(tmp_path, smollm2_dir):
    gsm = gsm8k_file(tmp_path / "gsm.jsonl", n=80)
    cfg = tmp_path / "ratchet.toml"
    assert runner.invoke(app, ["init", "--tasks", str(gsm), "--path", str(cfg)]).exit_code == 0
    db = tmp_path / "store" / "r.duckdb"
    cfg.write_text(
        cfg.read_text().replace(
            "[tasks]", f'db = "{db}"\nrun_dir = "{tmp_path / "runs"}"\n[model]\nname_or_path = "{smollm2_dir}"\n[tasks]', 1
        )
    )
    before = sorted(p.name for p in tmp_path.rglob("*"))
    r = runner.invoke(app, ["run", "--config", str(cfg), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "passed every preflight check" in r.stdout and "nothing was written" in r.stdout
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # no store, no run dir, no saved config
    cfg.write_text(cfg.read_text().replace("max_new_tokens_min = ", "max_new_tokens_min = -"))
    r = runner.invoke(app, ["run", "--config", str(cfg), "--dry-run"])
    assert r.exit_code == 2 and "max_new_tokens_min" in r.stderr
