"""Daemon pieces that need no server: the store lock, crash marking of rounds and of Prefect flow runs."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.flows.daemon.schedules import running_daemon
from ratchet.flows.daemon.service import DaemonError, acquire_lock, crash_flow_runs, mark_crashed_rounds, owner_alive
from ratchet.store.db import init_db, query, transaction
from ratchet.store.ingest import insert_rows

runner = CliRunner()
HOST = socket.gethostname()


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_second_lock_on_the_same_store_is_refused_with_the_holders_pid(tmp_path):
    path = tmp_path / "prefect" / "ratchet-up.lock"
    first = acquire_lock(path, {"pid": 4242, "api_url": "http://127.0.0.1:1/api"}, "PREFECT_HOME x")
    assert running_daemon(path) == {"pid": 4242, "api_url": "http://127.0.0.1:1/api"}
    t = time.monotonic()
    with pytest.raises(
        DaemonError, match=r"another `ratchet up` \(pid 4242\) is already serving PREFECT_HOME x .*kill -TERM 4242"
    ):
        acquire_lock(path, {"pid": os.getpid()}, "PREFECT_HOME x")
    assert time.monotonic() - t < 5
    first.release()
    assert running_daemon(path) is None
    acquire_lock(path, {"pid": os.getpid()}, "PREFECT_HOME x").release()


def test_lock_of_a_killed_daemon_is_free_again(tmp_path):
    path = tmp_path / "ratchet-up.lock"
    code = (
        "import sys, time; from pathlib import Path; from ratchet.flows.daemon.service import acquire_lock; "
        f"acquire_lock(Path({str(path)!r}), {{'pid': 1}}, 'x'); print('held', flush=True); time.sleep(60)"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(DaemonError):
            acquire_lock(path, {"pid": 2}, "x")
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    acquire_lock(path, {"pid": 3}, "x").release()  # the kernel dropped the dead holder's flock


def test_owner_alive():
    assert owner_alive(f"{HOST}:{os.getpid()}")
    assert not owner_alive(f"{HOST}:{_dead_pid()}")
    assert not owner_alive(None)  # an older Ratchet recorded no owner: nothing of it is still running
    assert owner_alive(f"some-other-host:{_dead_pid()}")  # cannot be checked from here: left alone


def _round(cid: str, i: int, status: str, owner: str | None) -> dict:
    now = datetime.now(UTC)
    return dict(
        round_id=f"{cid}-r{i}",
        campaign_id=cid,
        round_index=i,
        incumbent_checkpoint_id="base",
        status=status,
        started_at=now,
        finished_at=None,
        stage_seconds_json=None,
        owner=owner,
        flow_run_id=f"fr-{i}",
    )


def test_rounds_left_running_by_a_dead_process_are_marked_crashed(tmp_path, monkeypatch):
    db = tmp_path / "s.duckdb"
    init_db(db)
    dead = f"{HOST}:{_dead_pid()}"
    with transaction(db) as con:
        insert_rows(
            con,
            "campaigns",
            [dict(campaign_id="c1", name="camp", base_checkpoint_id="base", config_json="{}", created_at=datetime.now(UTC))],
        )
        insert_rows(
            con,
            "rounds",
            [
                _round("c1", 1, "completed", dead),
                _round("c1", 2, "running", dead),
                _round("c1", 3, "running", f"{HOST}:{os.getpid()}"),
                _round("c1", 4, "running", None),
                _round("c1", 5, "running", f"elsewhere:{_dead_pid()}"),
                _round("c1", 6, "failed", dead),
            ],
        )
    marked = mark_crashed_rounds([db, str(db)])  # the same store twice is handled once
    assert sorted(r["round_index"] for r in marked) == [2, 4]
    assert {r["flow_run_id"] for r in marked} == {"fr-2", "fr-4"}
    states = dict(query(db, "SELECT round_index, status FROM rounds ORDER BY ALL")[1])
    assert states == {1: "completed", 2: "crashed", 3: "running", 4: "crashed", 5: "running", 6: "failed"}
    assert query(db, "SELECT count(*) FROM rounds WHERE status = 'crashed' AND finished_at IS NOT NULL")[1][0][0] == 2
    assert mark_crashed_rounds([db]) == []  # idempotent
    # `ratchet status` shows the state, and no next run without a daemon, without waiting on a timeout
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "no-daemon"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    t = time.monotonic()
    r = runner.invoke(app, ["status", "--db", str(db), "--format", "json"])
    elapsed = time.monotonic() - t
    doc = json.loads(r.stdout)
    (c,) = doc["campaigns"]
    assert c["next_run"] is None and [x["state"] for x in c["rounds"]][:2] == ["completed", "crashed"]
    assert elapsed < 5


def test_store_made_before_owner_columns_gets_them(tmp_path):
    import duckdb

    db = tmp_path / "old.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute(
            "CREATE TABLE rounds (round_id VARCHAR PRIMARY KEY, campaign_id VARCHAR, round_index INTEGER, "
            "incumbent_checkpoint_id VARCHAR, status VARCHAR, started_at TIMESTAMP, finished_at TIMESTAMP, stage_seconds_json VARCHAR)"
        )
        con.execute("INSERT INTO rounds VALUES ('c-r1', 'c', 1, 'b', 'running', now(), NULL, NULL)")
        con.execute(
            "CREATE TABLE campaigns (campaign_id VARCHAR PRIMARY KEY, name VARCHAR, base_checkpoint_id VARCHAR, "
            "config_json VARCHAR, created_at TIMESTAMP)"
        )
    init_db(db)
    assert query(db, "SELECT owner, flow_run_id FROM rounds")[1] == [(None, None)]


def test_flow_runs_left_running_are_marked_crashed(prefect_harness):
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.states import Running

    @flow(name="daemon-crash-probe")
    def probe():
        pass

    with get_client(sync_client=True) as client:
        orphan = client.create_flow_run(probe, state=Running())
        other = client.create_flow_run(probe, state=Running())
        ids = crash_flow_runs(client, flow_run_ids={str(orphan.id)}, deployment_ids=set(), everything=False, message="test: gone")
        assert ids == [str(orphan.id)]
        assert client.read_flow_run(orphan.id).state.type.value == "CRASHED"
        assert client.read_flow_run(orphan.id).state.message == "test: gone"
        assert client.read_flow_run(other.id).state.type.value == "RUNNING"
        crash_flow_runs(client, flow_run_ids=set(), deployment_ids=set(), everything=True, message="all")
        assert client.read_flow_run(other.id).state.type.value == "CRASHED"


def test_status_shows_a_killed_runs_round_as_crashed_without_a_daemon(tmp_path, monkeypatch):
    db = tmp_path / "s.duckdb"
    init_db(db)
    with transaction(db) as con:
        insert_rows(
            con,
            "campaigns",
            [dict(campaign_id="c1", name="camp", base_checkpoint_id="base", config_json="{}", created_at=datetime.now(UTC))],
        )
        insert_rows(
            con,
            "rounds",
            [_round("c1", 1, "running", f"{HOST}:{_dead_pid()}"), _round("c1", 2, "running", f"{HOST}:{os.getpid()}")],
        )
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "no-daemon"))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    r = runner.invoke(app, ["status", "--db", str(db), "--format", "json"])
    (c,) = json.loads(r.stdout)["campaigns"]
    assert [x["state"] for x in c["rounds"]] == ["crashed", "running"]
    r = runner.invoke(app, ["status", "--db", str(db)])
    assert "crashed" in r.stdout
    assert query(db, "SELECT status FROM rounds ORDER BY round_index")[1] == [("running",), ("running",)]  # status only reads


def test_catch_up_removes_left_over_runs_and_starts_at_most_one(prefect_harness):
    """47 past-due runs of an old config's schedule: all go, one run with today's parameters starts."""
    from datetime import timedelta

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.states import Scheduled

    from ratchet.flows.daemon.schedules import TAG, catch_up

    @flow(name="catch-up-probe")
    def probe(config_path: str = "", campaign_name: str = "", rounds: int = 1):
        pass

    old, new = (
        {"config_path": "/old.json", "campaign_name": "cu", "rounds": 1},
        {"config_path": "/new.json", "campaign_name": "cu", "rounds": 1},
    )
    dep_id = probe.to_deployment(name="cu", parameters=new, tags=[TAG]).apply()
    now = datetime.now(UTC)
    with get_client(sync_client=True) as client:
        for i in range(47):
            client.create_flow_run_from_deployment(
                dep_id, parameters=old, state=Scheduled(scheduled_time=now - timedelta(seconds=30 * (i + 1)))
            )
        future_old = client.create_flow_run_from_deployment(
            dep_id, parameters=old, state=Scheduled(scheduled_time=now + timedelta(hours=1))
        )
        future_new = client.create_flow_run_from_deployment(
            dep_id, parameters=new, state=Scheduled(scheduled_time=now + timedelta(hours=1))
        )
        got = catch_up(client, {"cu": new}, {"cu": 1})
        assert got == {"cu": {"removed": 48, "missed": 47, "started": 1}}
        left = [r for r in client.read_flow_runs() if r.deployment_id == dep_id and r.state.type.value == "SCHEDULED"]
        assert {str(r.id) for r in left} - {str(future_new.id)} and str(future_old.id) not in {str(r.id) for r in left}
        assert all(dict(r.parameters) == new for r in left) and len(left) == 2  # the catch-up run and tomorrow's


def test_a_tick_during_a_running_round_is_skipped_without_a_flow_run(prefect_harness):
    """Issue 24, finding 10: a scheduled tick while the campaign's previous run is still going is deleted before the
    runner sees it (no Cancelled run per tick); a later tick, another campaign's and a person's run-now stay."""
    from datetime import timedelta

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.states import Running, Scheduled

    from ratchet.flows.daemon.schedules import TAG, skip_ticks

    @flow(name="tick-probe")
    def probe(config_path: str = "", campaign_name: str = "", rounds: int = 1):
        pass

    busy, idle = (probe.to_deployment(name=n, tags=[TAG]).apply() for n in ("busy", "idle"))
    now = datetime.now(UTC)
    with get_client(sync_client=True) as client:
        running = client.create_flow_run_from_deployment(busy, state=Running())
        tick = client.create_flow_run_from_deployment(busy, state=Scheduled(scheduled_time=now + timedelta(seconds=5)))
        later = client.create_flow_run_from_deployment(busy, state=Scheduled(scheduled_time=now + timedelta(hours=1)))
        asked = client.create_flow_run_from_deployment(busy, tags=[TAG, "run-now"])
        other = client.create_flow_run_from_deployment(idle, state=Scheduled(scheduled_time=now + timedelta(seconds=5)))
        skipped = skip_ticks(client, [busy, idle], horizon_s=16)
        assert [(d, r) for d, _, r in skipped] == [(str(busy), str(running.id))]
        left = {r.id for r in client.read_flow_runs() if r.deployment_id in (busy, idle)}
        assert tick.id not in left and {running.id, later.id, asked.id, other.id} <= left
        assert not [r for r in client.read_flow_runs() if r.deployment_id == busy and r.state.type.value == "CANCELLED"]
        assert skip_ticks(client, [idle], horizon_s=16) == []  # nothing in flight there


def test_the_daemon_sees_each_run_start_and_end_once(prefect_harness):
    """Issue 42, finding 12: the daemon's terminal says when a campaign's run starts and when it ends, with its state,
    once each; runs of other deployments, and runs that started before the daemon, are not reported."""
    from datetime import timedelta

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.states import Completed, Failed, Running

    from ratchet.flows.daemon.schedules import TAG, run_changes

    @flow(name="run-probe")
    def probe(config_path: str = "", campaign_name: str = "", rounds: int = 1):
        pass

    mine, other = (probe.to_deployment(name=n, tags=[TAG]).apply() for n in ("watched", "unwatched"))
    with get_client(sync_client=True) as client:
        since = datetime.now(UTC) - timedelta(seconds=1)
        seen: dict[str, str] = {}
        a = client.create_flow_run_from_deployment(mine, state=Running())
        b = client.create_flow_run_from_deployment(mine, state=Running())
        client.create_flow_run_from_deployment(other, state=Running())
        got = run_changes(client, [mine], seen, since)
        assert sorted((r, e) for _, r, e, _, _ in got) == sorted([(a.name, "started"), (b.name, "started")])
        assert run_changes(client, [mine], seen, since) == []  # once each
        client.set_flow_run_state(a.id, Completed(), force=True)
        client.set_flow_run_state(b.id, Failed(message="boom"), force=True)
        got = {r: (e, s) for _, r, e, s, _ in run_changes(client, [mine], seen, since)}
        assert got == {a.name: ("ended", "Completed"), b.name: ("ended", "Failed")}, got
        assert run_changes(client, [mine], seen, datetime.now(UTC) + timedelta(hours=1)) == []  # none started since


def test_a_signal_marks_its_own_rounds_interrupted_and_their_flow_runs_cancelled(prefect_harness, tmp_path):
    """Issue 42, finding 9: what `ratchet run`'s SIGINT/SIGTERM handler records before the process exits (and the
    daemon's shutdown, through ``status``/``cancelled``): this process's running rounds become ``interrupted``, their
    flow runs Cancelled; a round another process runs and a finished one are untouched."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.states import Running

    from ratchet.flows.rounds.observe.run_log import process_owner, record_interruption

    @flow(name="interrupt-probe")
    def probe():
        pass

    with get_client(sync_client=True) as client:
        mine, theirs = client.create_flow_run(probe, state=Running()), client.create_flow_run(probe, state=Running())
    db = tmp_path / "s.duckdb"
    init_db(db)
    with transaction(db) as con:
        insert_rows(con, "campaigns", [dict(campaign_id="c1", name="camp", base_checkpoint_id="base", config_json="{}", created_at=datetime.now(UTC))])  # fmt: skip
        rows = [_round("c1", 1, "completed", process_owner()), _round("c1", 2, "running", process_owner())]
        rows += [_round("c1", 3, "running", f"{HOST}:{os.getppid()}")]
        rows[1]["flow_run_id"], rows[2]["flow_run_id"] = str(mine.id), str(theirs.id)
        insert_rows(con, "rounds", rows)
    marked = record_interruption(str(db), "SIGINT")
    assert [(r["round_index"], r["campaign"]) for r in marked] == [(2, "camp")]
    states = dict(query(db, "SELECT round_index, status FROM rounds ORDER BY ALL")[1])
    assert states == {1: "completed", 2: "interrupted", 3: "running"}
    with get_client(sync_client=True) as client:
        assert client.read_flow_run(mine.id).state.type.value == "CANCELLED"
        assert "SIGINT received" in client.read_flow_run(mine.id).state.message
        assert client.read_flow_run(theirs.id).state.type.value == "RUNNING"
        # the daemon's shutdown: what it stopped is interrupted / Cancelled, not crashed / Crashed
        assert crash_flow_runs(client, flow_run_ids={str(theirs.id)}, deployment_ids=set(), everything=False, message="stop", cancelled=True) == [str(theirs.id)]  # fmt: skip
        assert client.read_flow_run(theirs.id).state.type.value == "CANCELLED"
    assert record_interruption(str(db), "SIGTERM") == []  # nothing of ours is running any more
