"""Soak: `ratchet up` on a 15 s interval runs >= 4 scheduled runs of one round each on CPU, with a reader holding
the store open throughout, one `kill -9` of the daemon (and everything it started) in the middle, a halt lifted
with `ratchet campaign resume --set` (a changed setting the later rounds run with), and checkpoint disk within the retention bound.

Slow (minutes): run with -m slow. It prints its figures (runs, rounds, peak checkpoint disk, reader errors).
"""

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from ratchet.store.db import StoreError, query
from ratchet.store.retention import folder_bytes

pytestmark = pytest.mark.slow
RATCHET = str(Path(sys.executable).with_name("ratchet"))
RUNS = 4

# A person's DuckDB connection on --db, open for the whole soak, queried every 0.5 s.
HOLD_READER = """
import json, sys, time
from pathlib import Path
import duckdb
db, stop, out = sys.argv[1:4]
while not Path(db).exists():
    time.sleep(0.2)
errors, n = [], 0
con = duckdb.connect(db, read_only=True)
while not Path(stop).exists():
    try:
        con.execute("SELECT count(*) FROM round_summary").fetchone()
        n += 1
    except duckdb.Error as e:
        errors.append(str(e))
    time.sleep(0.5)
con.close()
Path(out).write_text(json.dumps({"errors": errors, "queries": n}))
"""


def _q(db, sql):
    try:
        return query(db, sql, lock_timeout_s=10)[1]
    except StoreError:
        return None


def _up(cfg, env, log, port):
    out = open(log, "a")
    return subprocess.Popen(
        [RATCHET, "up", "--config", str(cfg), "--port", str(port), "--interval-s", "15"],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _completed_runs(prefect_db: Path) -> int:
    """Scheduled (deployment) flow runs that completed; 0 while Prefect's database is absent or busy."""
    try:
        with sqlite3.connect(f"file:{prefect_db}?mode=ro", uri=True, timeout=5) as con:
            sql = "SELECT count(*) FROM flow_run WHERE deployment_id IS NOT NULL AND state_type = 'COMPLETED'"
            return con.execute(sql).fetchone()[0]
    except sqlite3.Error:
        return 0


def _kill_tree(proc):
    tree = [proc, *psutil.Process(proc.pid).children(recursive=True)]
    for p in tree:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs([p for p in tree if isinstance(p, psutil.Process)], timeout=30)
    proc.wait(30)


class _DiskSampler(threading.Thread):
    """Samples the checkpoint folder every 0.1 s in the background: a rejected candidate lives only from its write to
    its round's gate (about a second with the tiny model), shorter than one pass of the soak's loop (a ``ratchet
    status`` subprocess each time). ``peak``: the folder's largest total; ``one``: the largest single checkpoint."""

    def __init__(self, ckpts: Path):
        super().__init__(daemon=True)
        self.ckpts, self.peak, self.one, self.done = ckpts, 0, 0, threading.Event()

    def run(self):
        while not self.done.wait(0.1):
            try:
                sizes = [folder_bytes(p) for p in self.ckpts.iterdir()] if self.ckpts.is_dir() else []
            except OSError:  # a checkpoint deleted while it was being measured
                continue
            self.peak, self.one = max(self.peak, sum(sizes)), max([self.one, *sizes])


def test_soak_nightly(tmp_path, tiny_model_dir):
    tasks = tmp_path / "tasks.jsonl"
    # The tiny model answers 7 to everything: a third of the golds are 7, so every round has verified-correct
    # rollouts to train on and writes a candidate (which prompts a round draws is fixed by the seed, not by chance).
    sums = [(f"What is {a} + {b}?", a + b) for a in range(1, 9) for b in range(1, 9)]
    sevens = [(f"What is {a} - {a - 7}?", 7) for a in range(10, 40)]
    tasks.write_text("\n".join(json.dumps({"question": q, "answer": str(g)}) for q, g in sums + sevens))
    db = tmp_path / "store" / "r.duckdb"
    cfg = tmp_path / "ratchet.toml"
    cfg.write_text(f"""
campaign = "soak"
db = "{db}"
[model]
name_or_path = "{tiny_model_dir}"
[tasks]
source = "jsonl"
path = "{tasks}"
heldout_fraction = 0.3
fewshot = 0
system_prompt = "sys"
train_prompts_per_round = 8
heldout_prompts = 8
[generation]
group_size = 2
max_new_tokens = 6
[sft]
epochs = 1
lr = 1e-4
[gate]
max_consecutive_rejections = 2
[schedule]
rounds_per_run = 1
""")
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_HOME")}
    env.update(RATCHET_HOME=str(tmp_path / "home"), PREFECT_RUNNER_POLL_FREQUENCY="2", OMP_NUM_THREADS="1")
    run = lambda *a: subprocess.run([RATCHET, *a], env=env, capture_output=True, text=True, timeout=120)  # noqa: E731
    log, stop, out = tmp_path / "up.log", tmp_path / "stop", tmp_path / "reader.json"
    # From the store's folder: the catalog's views name paths relative to it.
    Path(db).parent.mkdir(parents=True, exist_ok=True)  # the reader starts there before the daemon writes the store
    reader = subprocess.Popen(
        [sys.executable, "-c", HOLD_READER, str(Path(db).resolve()), str(stop), str(out)], cwd=Path(db).resolve().parent
    )
    ckpts = tmp_path / "store" / "r.runs" / "checkpoints"
    prefect_db = tmp_path / "home" / "prefect" / "prefect.db"
    killed, halted, resumed = False, False, False
    disk = _DiskSampler(ckpts)
    disk.start()
    t0 = time.monotonic()
    proc = _up(cfg, env, log, _free_port())
    try:
        while True:
            time.sleep(1)
            done = (_q(db, "SELECT count(*) FROM rounds WHERE status = 'completed'") or [[0]])[0][0]
            if done >= RUNS and _completed_runs(prefect_db) >= RUNS:
                break
            assert time.monotonic() - t0 < 1200, log.read_text()[-3000:]
            running = _q(db, "SELECT count(*) FROM rounds WHERE status = 'running'") or [[0]]
            if not killed and done >= 2 and running[0][0]:  # kill -9 mid-round, then start a new daemon
                _kill_tree(proc)
                killed = True
                proc = _up(cfg, env, log, _free_port())
            st = json.loads(run("status", "--db", str(db), "--format", "json").stdout or '{"campaigns": []}')["campaigns"]
            why = (st[0].get("not_running") if st else None) or ""
            if why.startswith("halted"):  # the gate's halt (8 held-out prompts rarely prove non-inferiority) or ours
                halted = True  # ... is lifted, each time, with the changed setting the later rounds run with
                r = run("campaign", "resume", "soak", "--reason", "soak: lifted", "--db", str(db), "--set", "sft.lr=5e-5")
                assert r.returncode == 0, r.stderr
                resumed = True
            elif killed and not halted and done >= 3:  # no halt yet: a person's
                assert run("campaign", "halt", "soak", "--reason", "soak: inspect", "--db", str(db)).returncode == 0
    finally:
        stop.touch()
        disk.done.set()
        _kill_tree(proc) if proc.poll() is None else None
        reader.wait(60)
    got = json.loads(out.read_text())
    rounds = _q(db, "SELECT round_index, status FROM rounds ORDER BY 1")
    per_round = _q(db, "SELECT round_id, count(*) FROM trajectories WHERE purpose = 'rollout' GROUP BY 1")
    flow_runs = _completed_runs(prefect_db)
    disk.join(10)
    peak, ckpt_size = disk.peak, disk.one  # one checkpoint's size, seen while it existed (retention may delete every one)
    figures = dict(
        runs=flow_runs, rounds=len(rounds), completed=sum(s == "completed" for _, s in rounds), peak_checkpoint_bytes=peak,
        checkpoint_bytes=ckpt_size, reader_queries=got["queries"], reader_errors=len(got["errors"]), minutes=round((time.monotonic() - t0) / 60, 1),
    )  # fmt: skip
    print("SOAK", json.dumps(figures))
    assert killed and halted and resumed
    assert got["errors"] == [] and got["queries"] > 100
    assert sum(s == "completed" for _, s in rounds) >= RUNS and flow_runs >= RUNS
    assert all(n == 16 for _, n in per_round)  # 8 prompts x 2 samples per round: nothing duplicated
    # base lives outside run_dir; kept: incumbent, best-ever, last 2 promoted, plus the candidate in flight
    assert 0 < peak <= 5 * ckpt_size, figures
    events = _q(db, "SELECT action FROM campaign_events ORDER BY created_at")
    assert ("resume",) in events
    resumed_cfg = json.loads((tmp_path / "store" / "r.runs" / "soak" / "config-resumed.json").read_text())
    assert resumed_cfg["sft"]["lr"] == 5e-5  # runs after the resume train with the changed setting
