"""``ratchet up``: one long-lived process that serves every campaign of a config on its schedule.

Start: take the daemon locks (one per ``$PREFECT_HOME`` and one per DuckDB store, ``flock``), check
each campaign like ``ratchet run`` does, mark rounds left ``running`` by a dead process as
``crashed``, start (or connect to) the Prefect server, mark flow runs left Running as Crashed, then
serve one deployment per campaign with a Prefect ``Runner`` (each flow run is a child process in
its own process group).

Stop (SIGINT, SIGTERM, or SIGHUP when its terminal closes): the runner stops polling and cancels in-flight flow runs (killing their
process groups); rounds and flow runs they left running are marked crashed; the server's process
group is terminated; the locks are released. A second signal during shutdown is ignored.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from ratchet.common.files import set_file_mode
from ratchet.common.procs import stop_descendants
from ratchet.loop.config import ConfigError, DaemonConfig, RatchetConfig

logger = logging.getLogger(__name__)

ACTIVE_STATES = ("RUNNING", "PENDING", "CANCELLING")


class DaemonError(RuntimeError):
    """``ratchet up`` cannot start (another daemon holds the store); the message says what to do."""


# --- locks ------------------------------------------------------------------------------------------


@dataclass
class Lock:
    path: Path
    fd: int

    def write(self, info: dict) -> None:
        """Replace the lock file's JSON (who holds it; read by the CLI)."""
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, json.dumps(info).encode(), 0)

    def release(self) -> None:
        os.ftruncate(self.fd, 0)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def acquire_lock(path: Path, info: dict, what: str) -> Lock:
    """Hold an exclusive ``flock`` on ``path`` (created if absent) for this process's lifetime.

    The kernel drops the lock when the process dies, so a killed daemon never leaves a stale lock.

    Raises:
        DaemonError: another process holds it; the message names its pid.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    for _ in range(10):  # a CLI probing the lock holds it shared for microseconds
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            time.sleep(0.1)
    else:
        os.close(fd)
        try:
            holder = json.loads(path.read_text() or "{}").get("pid", "?")
        except (OSError, ValueError):
            holder = "?"
        raise DaemonError(
            f"another `ratchet up` (pid {holder}) is already serving {what} (lock {path}); stop it first "
            f"(kill -TERM {holder}), or give this one its own RATCHET_HOME and db"
        )
    lock = Lock(path, fd)
    lock.write(info)
    return lock


def store_lock_path(db: str | Path) -> Path:
    return Path(f"{Path(db).resolve()}.ratchet-up.lock")


# --- crash marking ----------------------------------------------------------------------------------


def owner_alive(owner: str | None) -> bool:
    """Whether the ``'<host>:<pid>'`` that ran a round still lives (zombies count as dead).

    A round owned by another host is assumed alive (its process cannot be checked from here).
    """
    import psutil

    if not owner:
        return False  # written by a Ratchet that did not record owners: no process of it is still running
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname():
        return True
    try:
        return psutil.Process(int(pid)).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, ValueError):
        return False


def mark_crashed_rounds(dbs: list[str | Path], wait_s: float = 0.0, status: str = "crashed") -> list[dict]:
    """Mark rounds left ``running`` by a dead process as ``crashed`` in each store; returns those rows.

    ``wait_s``: give owners up to this many seconds to exit first (at shutdown, after killing them). ``status``:
    ``interrupted`` at a shutdown a signal began (the daemon stopped those processes itself).
    Raises StoreError as ``store.db.connect`` does.
    """
    from ratchet.loop.campaign.round_context import now
    from ratchet.store.db import init_db, transaction
    from ratchet.store.queries import mark_rounds_crashed, running_rounds

    marked = []
    for db in dict.fromkeys(str(Path(d).resolve()) for d in dbs):
        if not Path(db).exists():
            continue
        init_db(db)  # adds the owner / flow_run_id columns to an older store
        with transaction(db) as con:
            rows = running_rounds(con)
        deadline = time.monotonic() + wait_s
        while any(owner_alive(r["owner"]) for r in rows) and time.monotonic() < deadline:
            time.sleep(0.2)
        dead = [r for r in rows if not owner_alive(r["owner"])]
        with transaction(db) as con:
            mark_rounds_crashed(con, [r["round_id"] for r in dead], now(), status=status)
        for r in dead:
            logger.warning(
                "round %d of campaign %s was left running by %s (gone): marked %s",
                r["round_index"],
                r["campaign"],
                r["owner"] or "an unknown process",
                status,
            )
        marked += dead
    return marked


def crash_flow_runs(
    client,
    *,
    flow_run_ids: set[str],
    deployment_ids: set,
    everything: bool,
    message: str,
    cancelled: bool = False,
    spare_deployment_ids: frozenset = frozenset(),
) -> list[str]:
    """Set flow runs still Running/Pending/Cancelling to Crashed (forced; ``cancelled``: to Cancelled, the runs a
    signal's shutdown stopped); returns their ids.

    Those crashed: the ones in ``flow_run_ids`` (recorded on crashed rounds), the ones of
    ``deployment_ids`` (this daemon's deployments) and, with ``everything``, all of them (only safe
    on a server this daemon started, so that no other process can be using it), but never those of
    ``spare_deployment_ids`` (deployed to a work pool: a worker elsewhere runs them, and may still).
    """
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType
    from prefect.states import Cancelled, Crashed

    runs = client.read_flow_runs(
        flow_run_filter=FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType[s] for s in ACTIVE_STATES]))
        ),
        limit=200,
    )
    out = []
    for r in runs:
        if r.deployment_id in spare_deployment_ids:
            continue
        if everything or str(r.id) in flow_run_ids or r.deployment_id in deployment_ids:
            state = Cancelled(message=message) if cancelled else Crashed(message=message)
            client.set_flow_run_state(r.id, state, force=True)
            out.append(str(r.id))
    return out


def _crash_orphans(dbs: list[str], everything: bool, message: str, wait_s: float = 0.0, interrupted: bool = False) -> None:
    """Rounds and flow runs left running: ``crashed`` / Crashed, or (``interrupted``: a signal stopped the daemon, which
    stopped them) ``interrupted`` / Cancelled."""
    from prefect.client.orchestration import get_client

    from ratchet.flows.daemon.schedules import ratchet_deployments

    rounds = mark_crashed_rounds(dbs, wait_s=wait_s, status="interrupted" if interrupted else "crashed")
    with get_client(sync_client=True) as client:
        deps = ratchet_deployments(client)
        ids = crash_flow_runs(
            client,
            flow_run_ids={r["flow_run_id"] for r in rounds if r["flow_run_id"]},
            deployment_ids={d.id for d in deps if not d.work_pool_name},
            spare_deployment_ids=frozenset(d.id for d in deps if d.work_pool_name),
            everything=everything,
            message=message,
            cancelled=interrupted,
        )
    for i in ids:
        logger.warning("flow run %s was left running: marked %s", i, "Cancelled" if interrupted else "Crashed")


# --- serving ------------------------------------------------------------------------------------------


def check_schedule(cfg: RatchetConfig) -> None:
    """Build the campaign's Prefect schedule once, so a bad cron fails before any server starts.

    Raises:
        ConfigError: Prefect rejects the cron expression.
    """
    from ratchet.flows.daemon.schedules import prefect_schedule

    try:
        prefect_schedule(cfg.schedule)
    except ValueError as e:
        raise ConfigError(
            f"campaign {cfg.campaign!r}: schedule.cron {cfg.schedule.cron!r} is not valid ({e}); "
            "use 5 fields such as '0 2 * * *' (02:00 daily)"
        ) from None


def prepare_campaigns(dcfg: DaemonConfig) -> list[tuple[RatchetConfig, Path]]:
    """Each campaign with absolute store paths, checked like ``ratchet run`` and saved where its flow reads it (a
    work pool's campaign: only its schedule is checked here, the rest by its flow run on the worker).

    Raises:
        ConfigError, StoreError, ModelError, TaskDataError, CampaignConflict: as ``ratchet.flows.rounds.campaign.preflight``.
    """
    from ratchet.flows.rounds.campaign import preflight
    from ratchet.flows.rounds.state.identity import with_campaign_epoch
    from ratchet.loop.campaign.round_context import save_config

    out = []
    for cfg in dcfg.campaigns:
        check_schedule(cfg)
        cfg = cfg.with_absolute_paths()  # a work pool's: give the worker's paths as absolute ones
        if cfg.schedule.work_pool:  # its store and files are the worker's: its flow run checks and saves the config there
            out.append((cfg, cfg.saved_config_path()))
            continue
        cfg = with_campaign_epoch(cfg)
        preflight(cfg)
        out.append((cfg, save_config(cfg)))
    return out


def _stop_descendants(known: list, spare_pgids: list[int], grace_s: float = 10.0) -> list[int]:
    """``ratchet.common.procs.stop_descendants``: this process's descendants and ``known`` (a snapshot), but the server."""
    return stop_descendants(known, spare_pgids, grace_s)


async def _serve(campaigns: list[tuple[RatchetConfig, Path]], stop_signals: list[str], tree: list) -> None:
    """Register one deployment per campaign and run the Prefect runner until SIGINT/SIGTERM."""
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
    from prefect.deployments.runner import EntrypointType
    from prefect.runner import Runner

    from ratchet.flows.daemon.schedules import TAG, describe, prefect_schedule
    from ratchet.flows.daemon.work_pools import deploy_to_pool
    from ratchet.flows.rounds.campaign import campaign as campaign_flow

    runner = Runner(name="ratchet-up", pause_on_shutdown=False, prefetch_seconds=RUNNER_PREFETCH_S)
    registering = True
    loop = asyncio.get_running_loop()

    def on_signal(signum, frame=None) -> None:  # SIGINT, SIGTERM, SIGHUP (the terminal closed)
        if stop_signals:
            logger.warning("already stopping; waiting for flow runs to be cancelled and the server to stop")
            return
        stop_signals.append(signal.Signals(signum).name)
        import psutil

        tree.extend(psutil.Process().children(recursive=True))  # before the runner kills flow runs, orphaning their children
        logger.warning("%s received: stopping (cancelling in-flight runs, then the server)", stop_signals[0])
        loop.call_soon_threadsafe(lambda: loop.create_task(stop()))

    in_process = any(not cfg.schedule.work_pool for cfg, _ in campaigns)  # else no runner runs: _serve waits on `stopped`
    stopped = asyncio.Event()

    async def stop() -> None:
        stopped.set()
        for _ in range(600):
            if runner.started:
                await runner.astop()
                return
            if registering or not in_process:  # _serve returns by itself once registration ends / on `stopped`
                return
            await asyncio.sleep(0.1)  # between registration and the runner's start

    runner.handle_sigterm = on_signal  # Runner.start installs this for SIGTERM
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)  # also with no runner to start (every campaign on a work pool)
    signal.signal(signal.SIGHUP, on_signal)  # closing the terminal stops the daemon as SIGTERM does, never kills it
    served, deployments = {}, {}
    for cfg, path in campaigns:
        pool = cfg.schedule.work_pool
        # each scheduled run does schedule.rounds_per_run rounds and stops; the next run continues; a work pool's
        # run carries its config, which the worker checks and saves (worker_config)
        served[cfg.campaign] = {"config_path": str(path), "campaign_name": cfg.campaign, "rounds": cfg.schedule.rounds_per_run}
        served[cfg.campaign] |= {"config": cfg.model_dump(mode="json")} if pool else {}
        dep = await campaign_flow.ato_deployment(
            name=cfg.campaign,
            schedule=prefect_schedule(cfg.schedule),
            paused=not cfg.schedule.active,
            parameters=served[cfg.campaign],
            tags=[TAG],
            description=f"Ratchet campaign {cfg.campaign}: {cfg.schedule.rounds_per_run} round(s) per run, "
            f"max_rounds={cfg.max_rounds or 'unlimited'}, store {cfg.db}",
            # one run of a campaign at a time: a tick during a running round is skipped (_skip_ticks_forever); a
            # run-now while one runs is cancelled by this limit
            concurrency_limit=ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW),
            entrypoint_type=EntrypointType.MODULE_PATH if pool else EntrypointType.FILE_PATH,  # a worker pulls no code
        )
        when = describe(dep.schedules[0]) if dep.schedules else "no schedule"
        if pool:
            deployments[await deploy_to_pool(dep, pool)] = cfg.campaign
            logger.warning(
                "campaign %s: deployed to work pool %s (%s); its rounds run where `prefect worker start --pool %s` runs",
                cfg.campaign, pool, when, pool,
            )  # fmt: skip
        else:
            deployments[str(await runner.aadd_deployment(dep))] = cfg.campaign
            logger.warning("serving campaign %s: %s", cfg.campaign, when)
    if stop_signals:  # a signal arrived while registering
        return
    # Before the runner picks anything up: runs an earlier daemon's schedules left behind (past due, or with
    # another config's parameters) go; at most schedule.catch_up missed runs per campaign start now.
    caught = await asyncio.to_thread(_catch_up, served, {cfg.campaign: cfg.schedule.catch_up for cfg, _ in campaigns})
    for name, c in caught.items():
        if c["removed"]:
            logger.warning(
                "campaign %s: removed %d left-over scheduled run(s), %d missed; starting %d now",
                name,
                c["removed"],
                c["missed"],
                c["started"],
            )
    registering = False
    if stop_signals:  # a signal arrived while catching up: stop() saw `registering` and left it to us
        return
    guard = asyncio.create_task(_skip_ticks_forever(deployments))  # before the runner's first poll, faster than its polls
    try:
        if in_process:
            await runner.start()
        else:  # every campaign runs on a work pool's workers: keep the schedules guarded until a signal
            await stopped.wait()
    finally:
        guard.cancel()


RUNNER_PREFETCH_S = 10.0  # the runner picks a scheduled run up this long before it is due (Prefect's default)
TICK_POLL_S = 2.0  # how often the daemon looks for a tick that would collide with a running round
TICK_HORIZON_S = RUNNER_PREFETCH_S + 3 * TICK_POLL_S  # ahead of the runner, so it never sees a colliding tick


async def _skip_ticks_forever(names: dict[str, str]) -> None:
    """Skip, one log line each, the scheduled ticks of a campaign whose previous run is still going
    (``ratchet.flows.daemon.schedules.skip_ticks``), and say on the terminal when a campaign's run starts and ends,
    with its state (``run_changes``); an API error is logged and the next pass tries again."""
    from datetime import UTC, datetime

    import httpx
    from prefect.client.orchestration import get_client
    from prefect.exceptions import PrefectException

    from ratchet.flows.daemon.schedules import run_changes, skip_ticks

    since, seen = datetime.now(UTC), {}

    def once() -> tuple[list, list]:
        with get_client(sync_client=True) as client:
            return skip_ticks(client, list(names), TICK_HORIZON_S), run_changes(client, list(names), seen, since)

    while True:
        try:
            skipped, changes = await asyncio.to_thread(once)
            for dep, due, running in skipped:
                logger.warning(
                    "campaign %s: skipped the run scheduled for %s: its previous run (flow run %s) is still going",
                    names.get(dep, dep), due, running,
                )  # fmt: skip
            for dep, run, event, state, secs in changes:
                if event == "started":
                    logger.warning("campaign %s: run %s started", names.get(dep, dep), run)
                else:
                    logger.warning("campaign %s: run %s ended: %s after %.0f s", names.get(dep, dep), run, state, secs)
        except (httpx.HTTPError, PrefectException) as e:
            logger.warning("could not check for ticks during a running round (%s); trying again", e)
        await asyncio.sleep(TICK_POLL_S)


def _catch_up(served: dict[str, dict], catch_up_runs: dict[str, int]) -> dict[str, dict]:
    from prefect.client.orchestration import get_client

    from ratchet.flows.daemon.schedules import catch_up

    with get_client(sync_client=True) as client:
        return catch_up(client, served, catch_up_runs)


def run_daemon(dcfg: DaemonConfig, *, on_ready=None) -> str | None:
    """Serve every campaign of ``dcfg`` until SIGINT/SIGTERM; returns the name of the signal that stopped it.

    ``on_ready(api_url)`` is called once the server is healthy and deployments are about to be served.

    Raises:
        DaemonError: another daemon holds this PREFECT_HOME or one of the stores.
        ServerError: the Prefect server cannot start or be reached.
        ConfigError, StoreError, ModelError, TaskDataError, CampaignConflict: a campaign is invalid.
    """
    from ratchet.flows.daemon.run_server import drain_prefect_workers
    from ratchet.flows.daemon.schedules import state_path
    from ratchet.flows.daemon.server import prefect_server

    stop_signals: list[str] = []
    tree: list = []  # this process's descendants when the stop began
    for sig in (signal.SIGTERM, signal.SIGHUP):  # until serving: SIGTERM and SIGHUP unwind like Ctrl-C (server stopped)
        signal.signal(sig, signal.default_int_handler)
    p = dcfg.prefect
    prior_url = os.environ.get("PREFECT_API_URL")
    prior_auth = os.environ.get("PREFECT_API_AUTH_STRING")
    info = {"pid": os.getpid(), "host": socket.gethostname(), "api_url": None, "started_at": time.time()}
    modes = sorted({c.service.file_mode for c in dcfg.campaigns})
    if len(modes) > 1:  # the daemon's own files (Prefect's database, its logs) are shared by every campaign
        raise ConfigError(f"campaigns set different service.file_mode ({', '.join(modes)}); set one value for all of them")
    prior_umask = set_file_mode(modes[0] if modes else "private")  # the Prefect server and every flow run inherit it
    try:
        locks = [acquire_lock(state_path(), info, f"PREFECT_HOME {state_path().parent}")]
    except BaseException:
        os.umask(prior_umask)
        raise
    try:
        local = [c for c in dcfg.campaigns if not c.schedule.work_pool]  # a work pool's store is its worker's
        for db in dict.fromkeys(str(Path(c.db).resolve()) for c in local):
            locks.append(acquire_lock(store_lock_path(db), info, f"store {db}"))
        campaigns = prepare_campaigns(dcfg)
        dbs = [c.db for c, _ in campaigns if not c.schedule.work_pool]
        mark_crashed_rounds(dbs)
        server_pid: list[int] = []
        with prefect_server(
            p.port, host=p.host, home=state_path().parent, database_url=p.database_url, pid_out=server_pid
        ) as url:
            from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

            from ratchet.flows.daemon.api import read_auth

            updates = {PREFECT_API_URL: url}
            os.environ["PREFECT_API_URL"] = url  # flow-run child processes inherit it
            if not prior_url:  # our own server: Ratchet's clients, the runner and flow-run processes send its auth string
                os.environ["PREFECT_API_AUTH_STRING"] = updates[PREFECT_API_AUTH_STRING] = read_auth(state_path().parent)
            locks[0].write({**info, "api_url": url})
            with temporary_settings(updates=updates):
                _crash_orphans(
                    dbs, everything=not prior_url, message="found Running when `ratchet up` started: its process is gone"
                )
                if not prior_url:  # our own server: no run is in flight yet, so any taken device slot is stale
                    from ratchet.flows.compute.slots import reset_device_slots

                    reset_device_slots(tuple(dict.fromkeys(d for c in local for d in c.compute.devices)))
                if on_ready:
                    on_ready(url)
                try:
                    asyncio.run(_serve(campaigns, stop_signals, tree))
                finally:
                    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                        signal.signal(s, lambda *_: logger.warning("already stopping"))
                    _stop_descendants(tree, spare_pgids=server_pid)
                    _crash_orphans(
                        dbs,
                        everything=not prior_url,
                        wait_s=15.0,
                        message=f"`ratchet up` stopped ({stop_signals[0] if stop_signals else 'exit'}) while it ran",
                        interrupted=bool(stop_signals),
                    )
                    drain_prefect_workers()
        _stop_descendants(tree, spare_pgids=[])  # the server's group is gone; anything else left of ours goes too
    finally:
        for lock in reversed(locks):
            lock.release()
        os.umask(prior_umask)
        if prior_url is None:
            os.environ.pop("PREFECT_API_URL", None)
            if prior_auth is None:
                os.environ.pop("PREFECT_API_AUTH_STRING", None)
            else:
                os.environ["PREFECT_API_AUTH_STRING"] = prior_auth
    return stop_signals[0] if stop_signals else None
