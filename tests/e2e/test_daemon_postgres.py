"""`ratchet up` with Prefect on PostgreSQL: one scheduled round on the tiny model, then SIGTERM.

Runs where RATCHET_TEST_POSTGRES_URL names an empty PostgreSQL database (`.ci/with_postgres.sh` starts Debian's
PostgreSQL for it); RATCHET_REQUIRE_POSTGRES=1 turns the skip into a failure. Also checks that the daemon's files
(store, run dir) are private under the default `[service] file_mode`.
"""

import asyncio
import os
import signal
import subprocess

import pytest

from tests.e2e.test_daemon import RATCHET, _free_port, _q, _wait, daemon_config  # noqa: F401 - a fixture
from tests.store.test_file_modes import modes_outside

pytestmark = pytest.mark.slow
URL = os.environ.get("RATCHET_TEST_POSTGRES_URL")


def _flow_runs(url: str) -> list[tuple[str, str]]:
    """``(flow name, state)`` of every flow run in Prefect's PostgreSQL database."""
    import asyncpg

    async def fetch():
        con = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            rows = await con.fetch("SELECT f.name, r.state_type FROM flow_run r JOIN flow f ON f.id = r.flow_id")
        finally:
            await con.close()
        return [(r[0], str(r[1])) for r in rows]

    return asyncio.run(fetch())


@pytest.mark.skipif(not URL and os.environ.get("RATCHET_REQUIRE_POSTGRES") != "1", reason="RATCHET_TEST_POSTGRES_URL not set")
def test_up_on_postgres_runs_a_scheduled_round_and_stops(tmp_path, daemon_config):  # noqa: F811 - the fixture
    assert URL, "RATCHET_REQUIRE_POSTGRES=1 but RATCHET_TEST_POSTGRES_URL is not set"
    cfg = tmp_path / "pg.toml"
    cfg.write_text(daemon_config.read_text().replace("max_rounds = 2", "max_rounds = 1") + f'[prefect]\ndatabase_url = "{URL}"\n')
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_HOME", "RATCHET_FILE_MODE")}
    env.update(RATCHET_HOME=str(tmp_path / "home"), PREFECT_RUNNER_POLL_FREQUENCY="2", OMP_NUM_THREADS="1")
    db, log = tmp_path / "store" / "r.duckdb", tmp_path / "up.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [RATCHET, "up", "--config", str(cfg), "--port", str(_free_port()), "--interval-s", "5"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait("the server", lambda: "Prefect UI at http://127.0.0.1:" in log.read_text(), 300, proc, log)
        _wait("round 1's gate decision", lambda: _q(db, "SELECT decision FROM gate_decisions"), 900, proc, log, every_s=3)
        _wait("the flow run's state in PostgreSQL", lambda: ("campaign", "COMPLETED") in _flow_runs(URL), 120, proc, log)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not list((tmp_path / "home").rglob("*.db")), "Prefect used a SQLite database besides PostgreSQL"
    assert modes_outside(db.parent, "private") == []  # the store and its run dir, written under `ratchet up`
