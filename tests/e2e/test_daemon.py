"""`ratchet up` for real: a Prefect server, a deployment on a short interval, a round on the tiny model, SIGTERM.

Slow (a few minutes on 2 cores): the server takes ~15 s to start, each flow run imports torch in a
fresh process, and the tiny model's rounds take about a minute each.
"""

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ratchet.store.db import StoreError, query

pytestmark = pytest.mark.slow
RATCHET = str(Path(sys.executable).with_name("ratchet"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, cond, timeout_s: float, proc: subprocess.Popen, log: Path, every_s: float = 1.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        if proc.poll() is not None:
            pytest.fail(f"`ratchet up` exited with {proc.returncode} while waiting for {what}:\n{log.read_text()[-3000:]}")
        time.sleep(every_s)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}:\n{log.read_text()[-3000:]}")


def _q(db: Path, sql: str):
    try:
        return query(db, sql, lock_timeout_s=10)[1]
    except StoreError:
        return None  # not created yet


@pytest.fixture
def daemon_config(tmp_path, tiny_model_dir) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "\n".join(json.dumps({"question": f"What is {a} + {b}?", "answer": str(a + b)}) for a in range(1, 9) for b in range(1, 9))
    )
    cfg = tmp_path / "ratchet.toml"
    cfg.write_text(f"""
campaign = "tiny"
max_rounds = 2
db = "{tmp_path / "store" / "r.duckdb"}"
[model]
name_or_path = "{tiny_model_dir}"
[tasks]
source = "jsonl"
path = "{tasks}"
heldout_fraction = 0.3
fewshot = 0
system_prompt = "sys"
train_prompts_per_round = 12
heldout_prompts = 10
[generation]
group_size = 2
max_new_tokens = 6
[sft]
epochs = 1
lr = 1e-4
[gate]
max_consecutive_rejections = 3
[schedule]
cron = "0 2 * * *"
""")
    return cfg


def test_up_serves_a_schedule_runs_a_round_and_stops_cleanly(tmp_path, daemon_config):
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_HOME")}
    env.update(RATCHET_HOME=str(tmp_path / "home"), PREFECT_RUNNER_POLL_FREQUENCY="2", OMP_NUM_THREADS="1")
    db = tmp_path / "store" / "r.duckdb"
    port = _free_port()
    log = tmp_path / "up.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [RATCHET, "up", "--config", str(daemon_config), "--port", str(port), "--interval-s", "5"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    run = lambda *args: subprocess.run([RATCHET, *args], env=env, capture_output=True, text=True, timeout=120)  # noqa: E731
    try:
        _wait("the server", lambda: "Prefect UI at http://127.0.0.1:" in log.read_text(), 300, proc, log)
        # A second daemon on the same store refuses, quickly and clearly.
        second = run("up", "--config", str(daemon_config), "--port", str(_free_port()))
        assert second.returncode == 2 and "already serving" in second.stderr and str(proc.pid) in second.stderr, second.stderr
        # The 5 s interval fires and round 1 completes with its rows in DuckDB.
        _wait(
            "round 1's gate decision",
            lambda: _q(db, "SELECT decision FROM gate_decisions JOIN rounds USING (round_id) WHERE round_index = 1"),
            900,
            proc,
            log,
            every_s=3,
        )
        assert _q(db, "SELECT count(*) FROM trajectories WHERE purpose = 'rollout'")[0][0] >= 24
        rows = json.loads(run("schedule", "list", "--format", "json").stdout)
        assert [(r["campaign"], r["schedule"], r["active"]) for r in rows] == [("tiny", "every 5 s", True)]
        status = json.loads(run("status", "--db", str(db), "--format", "json").stdout)
        (camp,) = status["campaigns"]
        assert camp["next_run"] is not None and camp["rounds"][0]["state"] == "completed" and camp["rounds"][0]["decision"]
        # pause / resume / run-now against the daemon's API
        active = lambda: [r["active"] for r in json.loads(run("schedule", "list", "--format", "json").stdout)]  # noqa: E731
        assert run("schedule", "pause", "tiny").returncode == 0 and active() == [False]
        assert run("schedule", "resume", "tiny").returncode == 0 and active() == [True]
        now = run("schedule", "run-now", "tiny")
        assert now.returncode == 0 and "started tiny: flow run" in now.stdout, now.stderr
        bad = run("schedule", "pause", "nope")
        assert bad.returncode == 2 and "no served campaign 'nope'; served: tiny" in bad.stderr
        # Stop mid-round 2 when possible (the flow run then has live children), else between runs.
        _wait("round 2 to start", lambda: _q(db, "SELECT status FROM rounds WHERE round_index = 2"), 300, proc, log)
        tree = psutil.Process(proc.pid).children(recursive=True)
        assert any("ratchet.flows.daemon.api" in p.cmdline() for p in tree)  # the Prefect server
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(tree, timeout=10)
    assert alive == [], f"orphans after SIGTERM: {[(p.pid, p.cmdline()) for p in alive]}"
    assert _q(db, "SELECT count(*) FROM rounds WHERE status = 'running'")[0][0] == 0
    assert _q(db, "SELECT count(*) FROM rounds WHERE status = 'crashed'")[0][0] == 0  # stopped by us: 'interrupted'
    with sqlite3.connect(tmp_path / "home" / "prefect" / "prefect.db") as con:
        left = con.execute(
            "SELECT name, state_type FROM flow_run WHERE state_type IN ('RUNNING', 'PENDING', 'CANCELLING')"
        ).fetchall()
    assert left == []
    assert "stopped (SIGTERM)" in log.read_text()
    # the terminal said when each run started and ended (issue 42, finding 12)
    assert re.search(r"campaign tiny: run \S+ started", log.read_text()), log.read_text()[-3000:]
    assert re.search(r"campaign tiny: run \S+ ended: Completed after \d+ s", log.read_text()), log.read_text()[-3000:]


def test_up_stops_cleanly_on_sighup(tmp_path, daemon_config):
    """Closing the terminal (SIGHUP) stops `ratchet up` as SIGTERM does: exit 0, no process or running round left
    (issue 24, finding 7; before, SIGHUP killed it outright)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_HOME")}
    env.update(RATCHET_HOME=str(tmp_path / "home"), PREFECT_RUNNER_POLL_FREQUENCY="2", OMP_NUM_THREADS="1")
    log = tmp_path / "up.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [RATCHET, "up", "--config", str(daemon_config), "--port", str(_free_port())],  # cron at 02:00: no round starts
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait("serving", lambda: "serving campaign tiny" in log.read_text(), 300, proc, log)
        tree = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(tree, timeout=10)
    assert alive == [] and "stopped (SIGHUP)" in log.read_text(), log.read_text()[-2000:]
