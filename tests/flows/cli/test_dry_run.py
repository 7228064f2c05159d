"""`ratchet run --dry-run` and `ratchet check`: every preflight check and the pilot, nothing written (issue 24)."""

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
            "[tasks]",
            f'db = "{db}"\nrun_dir = "{tmp_path / "runs"}"\n[model]\nname_or_path = "{smollm2_dir}"\n'
            "[preflight]\npilot = false\n[tasks]",  # skipped: SmolLM2's pilot costs CI a minute (the tiny model's: below)
            1,
        )
    )
    before = sorted(p.name for p in tmp_path.rglob("*"))
    r = runner.invoke(app, ["run", "--config", str(cfg), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "passed every preflight check" in r.stdout and "nothing was written" in r.stdout
    assert "pilot:" not in r.stderr  # [preflight] pilot = false
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # no store, no run dir, no saved config
    cfg.write_text(cfg.read_text().replace("max_new_tokens_min = ", "max_new_tokens_min = -"))
    r = runner.invoke(app, ["check", "--config", str(cfg)])  # `ratchet check` is `ratchet run --dry-run`
    assert r.exit_code == 2 and "max_new_tokens_min" in r.stderr


def _sums_config(tmp_path, model_dir, preflight: str = "pilot_prompts = 2"):
    """A tiny-model campaign over 40 sums none of whose golds is 7 (the tiny model's only answer), 4 held out."""
    import json

    tasks = tmp_path / "t.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"What is {a} + 10?", "answer": str(a + 10)}) + "\n" for a in range(40)))
    cfg = tmp_path / "r.toml"
    cfg.write_text(
        f'db = "{tmp_path / "r.duckdb"}"\n[model]\nname_or_path = "{model_dir}"\n'
        f'[tasks]\nsource = "jsonl"\npath = "{tasks}"\nfewshot = 0\nsystem_prompt = "sys"\nheldout_prompts = 4\n'
        f"train_prompts_per_round = 8\n[generation]\nmax_new_tokens = 12\ngroup_size = 2\n[preflight]\n{preflight}\n"
    )
    return cfg


def _ratchet_cli(tmp_path):
    """The installed `ratchet` script and an environment with its own RATCHET_HOME (for a run in a subprocess)."""
    import os
    import sys
    from pathlib import Path

    return str(Path(sys.executable).with_name("ratchet")), {**os.environ, "RATCHET_HOME": str(tmp_path / "home")}


def test_pilot_says_what_would_waste_the_round(tmp_path, tiny_model_dir):
    """Issue 24, finding 2: before the first round, a few samples of the base model at the round's settings say, one
    line each, what would waste the round: here nothing would be right to train on. The tiny model answers every
    question 'Answer: 7' and no gold here is 7. (Cut completions, the cap that fits and unreadable answers:
    tests/loop/train/test_pilot_checks.py; the second, longer sample would cost this test another worker process.)"""

    cfg = _sums_config(tmp_path, tiny_model_dir)
    r = runner.invoke(app, ["check", "--config", str(cfg)])
    assert r.exit_code == 0 and "passed every preflight check (store, model, tasks, lengths, disk, gate, pilot)" in r.stdout
    # issue 42, finding 4: each count with its evidence; pilot_prompts = 2 x G = 2 is raised to round 1's whole draw
    # of 8 prompts (22 samples wanted), so a true 10% would show a correct sample 81% of the time
    line = " ".join(r.stderr.split())
    assert (
        "pilot: 8 train prompt(s) x 2 samples of the base model: 0/16 verified correct (the true rate could be 0%-19%, "
        "95%), 0/16 cut at max_new_tokens = 12; verdicts: wrong 16" in line
    ), line
    assert "pilot: 0/16 verified correct on 8 train prompt(s): the true base rate could still be up to ~17%" in line
    assert "would have shown a correct sample 81% of the time" in line
    assert "RFT will likely find few correct rollouts to train on (verdicts: wrong 16; e.g. 'Answer: 7')" in line
    assert "completions are cut" not in r.stderr and "parseable" not in r.stderr  # 'Answer: 7' fits and is read
    assert not (tmp_path / "r.duckdb").exists()  # the pilot writes nothing either


def test_ctrl_c_during_the_pilot_of_a_check_says_nothing_was_written(tmp_path, tiny_model_dir):
    """Issue 42, finding 2: a dry run has no round to resume, so its Ctrl-C says so (not 'resume the round')."""
    import signal
    import subprocess
    import time

    import psutil

    cfg = _sums_config(tmp_path, tiny_model_dir)
    ratchet, env = _ratchet_cli(tmp_path)
    proc = subprocess.Popen(
        [ratchet, "check", "--config", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:  # the pilot's engine rank is up: the pilot is running
        kids = psutil.Process(proc.pid).children(recursive=True)
        if any("ratchet.flows.compute.worker" in " ".join(k.cmdline()) for k in kids if k.is_running()):
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, errs = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, errs)
    assert "ratchet check: interrupted; nothing was written" in errs and "resume the round" not in errs, errs
    assert not (tmp_path / "r.duckdb").exists()


def test_a_preflight_warning_is_printed_once(tmp_path, tiny_model_dir):
    """Issue 42, finding 8: the gate's small-eval-set warning came twice, as a log line and as 'warning:'."""
    import subprocess

    cfg = _sums_config(tmp_path, tiny_model_dir, "pilot = false")
    ratchet, env = _ratchet_cli(tmp_path)
    p = subprocess.run([ratchet, "check", "--config", str(cfg)], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout + p.stderr
    assert out.count("is small for its rule") == 1 and "warning: the gate's eval set 'heldout' is small" in p.stderr, out
