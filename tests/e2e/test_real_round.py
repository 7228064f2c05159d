"""End to end on the real SmolLM2-135M-Instruct: rounds through the CLI, killed with kill -9 and finished by a rerun."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ratchet.store.db import query
from tests.flows.rounds.test_round import TABLES, assert_lineage

pytestmark = pytest.mark.slow

SMALL = """
campaign = "e2e"
max_rounds = {rounds}
db = "{db}"
[tasks]
train_prompts_per_round = 8
heldout_prompts = 8
[generation]
group_size = 4
max_new_tokens = 24
batch_size = 32
[sft]
epochs = 1
[preflight]
pilot = false  # tested on its own (tests/flows/cli/test_dry_run.py); here it would only delay the kill
"""


def ratchet(*args: str, **kw) -> subprocess.Popen:
    exe = Path(sys.executable).with_name("ratchet")
    return subprocess.Popen([str(exe), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def counts(db):
    return {t: query(db, f"SELECT count(*) FROM {t}")[1][0][0] for t in TABLES}


def assert_finished_round(db, out: str) -> None:
    """One real round's rows: every rollout verified, full lineage, one gate decision; a promotion never below the base
    beyond the tolerance."""
    assert "held-out pass@1" in out
    c = counts(db)
    assert c["rounds"] == 1 and c["gate_decisions"] == 1 and c["campaigns"] == 1
    assert query(db, "SELECT count(*) FROM trajectories WHERE purpose = 'rollout'")[1][0][0] == 8 * 4
    assert query(db, "SELECT count(*) - count(DISTINCT trajectory_id) FROM trajectories")[1][0][0] == 0
    assert c["verdicts"] == c["trajectories"]
    assert_lineage(db)
    (decision,) = query(db, "SELECT decision FROM gate_decisions")[1][0]
    assert decision in ("promote", "reject", "halt", "no_candidate")
    rows = query(
        db,
        """SELECT g.candidate_pass1, g.tolerance, e.value FROM gate_decisions g JOIN campaigns c USING (campaign_id)
                        JOIN evaluations e ON e.checkpoint_id = c.base_checkpoint_id AND e.metric = 'heldout/pass@1'
                        WHERE g.decision = 'promote'""",
    )[1]
    assert all(cand >= base - tol for cand, tol, base in rows)


def _round_started(db) -> bool:
    try:
        return query(db, "SELECT count(*) FROM rounds", timeout_s=5)[1][0][0] > 0
    except Exception:  # noqa: BLE001 - the store may not exist yet or be mid-creation
        return False


@pytest.mark.parametrize("stage", ["generate", "train"])
def test_kill_9_mid_round_then_rerun_finishes_without_duplicates(tmp_path, smollm2_dir, stage):
    """SIGKILL the whole round process group in the middle of `stage`, then re-run the same command: it finishes the
    round with the rows of an uninterrupted one (no separate uninterrupted real round runs: it would check the same)."""
    db = tmp_path / "k.duckdb"
    cfg = tmp_path / "k.toml"
    cfg.write_text(SMALL.format(rounds=1, db=db))
    round_dir = tmp_path / "k.runs" / "e2e" / "round-1"
    p = ratchet("run", "--config", str(cfg), start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline and p.poll() is None:
        if stage == "generate" and _round_started(db):
            time.sleep(2)  # generation of 32 rollouts takes ~10 s
            break
        if stage == "train" and (round_dir / "filter" / "_SUCCESS.json").exists():
            time.sleep(3)  # loading + 4 optimizer steps take ~20 s
            break
        time.sleep(0.3)
    assert not (round_dir / stage / "_SUCCESS.json").exists(), f"{stage} finished before the kill"
    assert p.poll() is None, "the round finished before it could be killed; " + (p.stdout.read() if p.stdout else "")
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    incumbent_untouched = query(db, "SELECT count(*) FROM gate_decisions")[1][0][0] == 0
    assert incumbent_untouched
    p2 = ratchet("run", "--config", str(cfg))
    out, _ = p2.communicate(timeout=900)
    assert p2.returncode == 0, out
    # The resumed round is a whole real round: its rows are what one uninterrupted round writes.
    assert_finished_round(db, out)
    c = counts(db)
    # A third run changes nothing.
    p3 = ratchet("run", "--config", str(cfg))
    p3.communicate(timeout=600)
    assert p3.returncode == 0 and counts(db) == c
