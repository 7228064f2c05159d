"""`ratchet up --work-pool`: the daemon deploys the campaign to a Prefect `process` work pool and a separate
`prefect worker start --pool` process (its own PREFECT_HOME, as on another machine) runs the scheduled round.

Slow (~2-3 minutes on 2 cores): the server's start, the worker's flow-run process importing torch, one tiny round.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet.flows.daemon.api import auth_path
from tests.e2e.test_daemon import _free_port, _q, _wait, daemon_config  # noqa: F401 - daemon_config is a fixture

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
POOL = "ratchet-test-pool"


def _flow_runs(url: str, auth: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: url, PREFECT_API_AUTH_STRING: auth}):
        with get_client(sync_client=True) as client:
            (dep,) = client.read_deployments()
            return dep, client.read_flow_runs(limit=50)


def test_up_deploys_to_a_work_pool_and_a_worker_runs_the_round(tmp_path, daemon_config):  # noqa: F811
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_HOME", "PREFECT_API_AUTH_STRING")}
    env.update(RATCHET_HOME=str(tmp_path / "home"), OMP_NUM_THREADS="1")
    daemon_config.write_text(daemon_config.read_text().replace("max_rounds = 2", "max_rounds = 1"))
    db = tmp_path / "store" / "r.duckdb"
    port = _free_port()
    log, wlog = tmp_path / "up.log", tmp_path / "worker.log"
    with open(log, "w") as out:
        up = subprocess.Popen(
            [str(BIN / "ratchet"), "up", "--config", str(daemon_config), "--port", str(port), "--interval-s", "5",
             "--work-pool", POOL],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    worker = None
    try:
        _wait("the deployment", lambda: f"deployed to work pool {POOL}" in log.read_text(), 300, up, log)
        assert not db.exists()  # the daemon never opens a work pool campaign's store: the worker's flow run does
        url = f"http://127.0.0.1:{port}/api"
        auth = auth_path(tmp_path / "home" / "prefect").read_text().strip()
        wenv = {**env, "PREFECT_API_URL": url, "PREFECT_API_AUTH_STRING": auth, "PREFECT_HOME": str(tmp_path / "worker-home")}
        wenv.update(PREFECT_WORKER_QUERY_SECONDS="2", PREFECT_WORKER_PREFETCH_SECONDS="5")
        with open(wlog, "w") as out:
            worker = subprocess.Popen(
                [str(BIN / "prefect"), "worker", "start", "--pool", POOL, "--type", "process"],
                env=wenv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        decided = _wait(
            "round 1's gate decision (run by the worker)",
            lambda: _q(db, "SELECT decision, flow_run_id FROM gate_decisions JOIN rounds USING (round_id) WHERE round_index = 1"),
            900, worker, wlog, every_s=3,
        )  # fmt: skip
        ((decision, flow_run_id),) = decided
        completed = lambda: [  # noqa: E731 - the campaign's run ends a little after its round's gate
            r for r in _flow_runs(url, auth)[1] if r.deployment_id and r.state_type and r.state_type.name == "COMPLETED"
        ]
        _wait("the worker's flow run to complete", completed, 300, worker, wlog, every_s=2)
        dep, runs = _flow_runs(url, auth)
        assert dep.work_pool_name == POOL and dep.entrypoint == "ratchet.flows.rounds.campaign.campaign"
        assert dep.parameters["config"]["campaign"] == "tiny"
        assert flow_run_id in {str(r.id) for r in runs}
        ran = [r for r in runs if r.deployment_id == dep.id and r.state_type and r.state_type.name == "COMPLETED"]
        assert ran and all(r.work_pool_name == POOL and r.infrastructure_pid for r in ran), ran  # the worker ran them
        # One run of the campaign at a time: no two runs that ran overlap.
        spans = sorted((r.start_time, r.end_time) for r in runs if r.deployment_id == dep.id and r.start_time and r.end_time)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
        assert "skipped the run scheduled" in log.read_text()  # ticks during the round were skipped, not queued
        # `ratchet schedule pause` reaches a work pool's deployment too; with nothing scheduled or in flight the
        # worker stops at once (a SIGTERM during a flow run is forwarded to that run and the worker polls on)
        paused = subprocess.run([str(BIN / "ratchet"), "schedule", "pause", "tiny"], env=env, capture_output=True, text=True)
        assert paused.returncode == 0 and "paused tiny" in paused.stdout, paused.stdout + paused.stderr
        idle = lambda: (
            not [  # noqa: E731
                r for r in _flow_runs(url, auth)[1] if r.state_type and r.state_type.name in ("SCHEDULED", "PENDING", "RUNNING")
            ]
        )
        _wait("the paused campaign's runs to end", idle, 300, worker, wlog, every_s=2)
        worker.send_signal(signal.SIGTERM)
        try:  # Prefect's worker shutdown, not Ratchet's: in CI it sometimes re-signals itself and hangs (left to `finally`)
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        for p in (up, worker):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    assert _q(db, "SELECT status FROM rounds WHERE round_index = 1") == [("completed",)]
