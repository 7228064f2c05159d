"""Campaign schedules as Prefect deployments: how ``ratchet up`` declares them, and how the CLI reads
and changes them (``ratchet schedule list|pause|resume|run-now``, ``ratchet status`` next_run).

Each campaign is one deployment of the ``campaign`` flow named after the campaign and tagged
``ratchet``. The CLI finds the API of the running daemon from ``PREFECT_API_URL``, else from the
daemon's lock file under ``$PREFECT_HOME`` (see ``ratchet.flows.daemon.service``), and sends the
daemon's auth string (``$PREFECT_HOME/api-auth``, see ``ratchet.flows.daemon.api``).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ratchet.loop.config import ScheduleConfig

TAG = "ratchet"
FLOW_NAME = "campaign"
STATE_FILE = "ratchet-up.lock"  # under PREFECT_HOME; JSON {pid, api_url, ...}, flock-held while the daemon runs


class ScheduleError(RuntimeError):
    """No daemon API is reachable, or the campaign has no deployment; the message says what to do."""


def local_timezone() -> str:
    """This machine's IANA time zone name (``UTC`` when it cannot be told)."""
    try:
        import tzlocal

        return tzlocal.get_localzone_name() or "UTC"
    except Exception:  # noqa: BLE001 - tzlocal raises several kinds on odd /etc/localtime setups; UTC is the documented fallback
        return "UTC"


def prefect_schedule(s: ScheduleConfig):
    """The Prefect schedule of a campaign: ``Interval(interval_s)`` when set, else ``Cron(cron, timezone)``.

    Raises:
        ValueError: Prefect rejects the cron expression (the message names it).
    """
    from prefect.schedules import Cron, Interval

    if s.interval_s is not None:
        return Interval(timedelta(seconds=s.interval_s), active=s.active)
    return Cron(s.cron, timezone=s.timezone or local_timezone(), active=s.active)


def describe(schedule) -> str:
    """``cron '0 2 * * *' (Europe/Berlin)`` or ``every 60 s`` for a Prefect deployment schedule."""
    sch = schedule.schedule
    if getattr(sch, "cron", None):
        return f"cron {sch.cron!r} ({sch.timezone or 'UTC'})"
    if getattr(sch, "interval", None) is not None:
        return f"every {sch.interval.total_seconds():g} s"
    return str(sch)


# --- finding the daemon's API -------------------------------------------------------------------


def state_path() -> Path:
    from ratchet.loop.checkpoints import ratchet_home

    return Path(os.environ.get("PREFECT_HOME") or ratchet_home() / "prefect").expanduser() / STATE_FILE


def running_daemon(path: Path | None = None) -> dict | None:
    """The running daemon's state ``{pid, api_url, ...}``, or None when no ``ratchet up`` holds the lock."""
    path = path or state_path()
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held: a daemon is running
            text = Path(path).read_text()
            return json.loads(text) if text.strip() else None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def daemon_api_url() -> str | None:
    """``PREFECT_API_URL`` when set, else the API of the running ``ratchet up``, else None."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"].rstrip("/")
    state = running_daemon()
    return state.get("api_url") if state else None


def daemon_auth_string() -> str | None:
    """The auth string for the daemon's API: ``PREFECT_API_AUTH_STRING`` when set, else the daemon's file, else None.

    Raises:
        ScheduleError: the auth file exists but is unsafe or unreadable (the message says how to fix it).
    """
    from ratchet.flows.daemon.api import AuthFileError, read_auth

    if os.environ.get("PREFECT_API_AUTH_STRING"):
        return os.environ["PREFECT_API_AUTH_STRING"]
    try:
        return read_auth(state_path().parent)
    except AuthFileError as e:
        raise ScheduleError(str(e)) from None


@contextmanager
def daemon_client(api_url: str | None = None) -> Iterator:
    """A sync Prefect client on the daemon's API, authenticated with :func:`daemon_auth_string`.

    Raises:
        ScheduleError: no API is known, it does not answer within 2 s, or the auth file is unsafe.
    """
    from ratchet.flows.daemon.server import api_healthy

    url = api_url or daemon_api_url()
    if url is None:
        raise ScheduleError(
            "no running `ratchet up` found (and PREFECT_API_URL is not set); start it with `ratchet up --config ratchet.toml`"
        )
    if not api_healthy(url, timeout_s=2.0):
        raise ScheduleError(f"the Prefect API at {url} does not answer; is `ratchet up` still running?")
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    updates = {PREFECT_API_URL: url}
    auth = daemon_auth_string()
    if auth:
        updates[PREFECT_API_AUTH_STRING] = auth
    with temporary_settings(updates=updates), get_client(sync_client=True) as client:
        yield client


# --- reading and changing schedules ---------------------------------------------------------------


def ratchet_deployments(client) -> list:
    """Deployments ``ratchet up`` serves (tag ``ratchet``), by name."""
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterTags

    deps = client.read_deployments(deployment_filter=DeploymentFilter(tags=DeploymentFilterTags(all_=[TAG])))
    return sorted(deps, key=lambda d: d.name)


def next_runs(client, deployment_ids: list) -> dict:
    """``{deployment_id: earliest expected start}`` of their Scheduled flow runs (missing when none)."""
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    if not deployment_ids:
        return {}
    runs = client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=deployment_ids)),
        flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))),
        sort=FlowRunSort.EXPECTED_START_TIME_ASC,
        limit=200,
    )
    out: dict = {}
    for r in runs:
        out.setdefault(r.deployment_id, r.expected_start_time)
    return out


def schedule_rows(client) -> list[dict]:
    """One row per served campaign: ``{campaign, schedule, active, next_run, deployment_id}``."""
    deps = ratchet_deployments(client)
    nxt = next_runs(client, [d.id for d in deps])
    rows = []
    for d in deps:
        active = not d.paused and any(s.active for s in d.schedules)
        rows.append(
            {
                "campaign": d.name,
                "schedule": "; ".join(describe(s) for s in d.schedules) or "none",
                "active": active,
                "next_run": _iso(nxt.get(d.id)) if active else None,
                "deployment_id": str(d.id),
            }
        )
    return rows


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


def find_deployment(client, campaign: str):
    """The deployment serving ``campaign``.

    Raises:
        ScheduleError: none; the message lists the served campaigns.
    """
    deps = ratchet_deployments(client)
    for d in deps:
        if d.name == campaign:
            return d
    names = [d.name for d in deps] or ["none"]
    raise ScheduleError(f"no served campaign {campaign!r}; served: {', '.join(names)} (see `ratchet schedule list`)")


def set_paused(client, campaign: str, paused: bool) -> None:
    """Pause or resume the campaign's schedule (scheduled runs not yet started are removed on pause)."""
    d = find_deployment(client, campaign)
    (client.pause_deployment if paused else client.resume_deployment)(d.id)


def run_now(client, campaign: str) -> str:
    """Start the campaign now (the daemon picks the run up within its poll interval); returns the flow run id."""
    d = find_deployment(client, campaign)
    return str(client.create_flow_run_from_deployment(d.id, tags=[TAG, "run-now"]).id)


def next_run_by_campaign(timeout_s: float = 1.0) -> dict[str, str]:
    """``{campaign: ISO time}`` of the next scheduled run of each served campaign; empty when no daemon answers.

    Costs at most ``timeout_s`` seconds when no API is reachable (one health probe).
    """
    from ratchet.flows.daemon.server import api_healthy

    url = daemon_api_url()
    if url is None or not api_healthy(url, timeout_s=timeout_s):
        return {}
    import httpx

    try:
        with daemon_client(url) as client:
            return {r["campaign"]: r["next_run"] for r in schedule_rows(client) if r["next_run"]}
    except httpx.HTTPError as e:  # the daemon stopped between the probe and the query: no next run to report
        logging.getLogger(__name__).warning("cannot read schedules from %s: %s", url, e)
        return {}


IN_FLIGHT = ("RUNNING", "PENDING", "CANCELLING")


TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "CRASHED")


def run_changes(client, deployment_ids: list, seen: dict[str, str], since: datetime) -> list[tuple[str, str, str, str, float]]:
    """The flow runs of ``deployment_ids`` that started after ``since`` and began running or ended since the last
    call (``seen``: flow run id -> its last state type, updated in place), for the daemon's terminal lines.

    Returns ``(deployment id, flow run name, 'started' | 'ended', state name, run seconds)`` per change, oldest
    first; a run that started and ended between two calls shows only as ended.
    """
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterStartTime,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    if not deployment_ids:
        return []
    runs = client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=deployment_ids)),
        flow_run_filter=FlowRunFilter(
            start_time=FlowRunFilterStartTime(after_=since),
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType[s] for s in ("RUNNING", *TERMINAL)])),
        ),
        sort=FlowRunSort.START_TIME_ASC,
        limit=200,
    )
    out = []
    for r in runs:
        kind = r.state_type.name if r.state_type else ""
        before, seen[str(r.id)] = seen.get(str(r.id)), kind
        if kind == before:
            continue
        secs = r.total_run_time.total_seconds() if r.total_run_time else 0.0
        if kind == "RUNNING":
            out.append((str(r.deployment_id), r.name, "started", r.state_name or "Running", secs))
        elif kind in TERMINAL:
            out.append((str(r.deployment_id), r.name, "ended", r.state_name or kind.title(), secs))
    return out


def skip_ticks(client, deployment_ids: list, horizon_s: float) -> list[tuple[str, str, str]]:
    """Delete every Scheduled run due within ``horizon_s`` seconds of a deployment whose previous run is still in
    flight (Running, Pending, Cancelling), before the runner picks it up: a tick during a running round is skipped,
    not turned into a Cancelled flow run. A run a person asked for (``ratchet schedule run-now``) stays, and the
    deployment's concurrency limit cancels it in plain view.

    Returns ``(deployment id, skipped run's expected start as ISO text, the in-flight run's id)`` per deleted run.
    """
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterExpectedStartTime,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    if not deployment_ids:
        return []
    busy = client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=deployment_ids)),
        flow_run_filter=FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType[s] for s in IN_FLIGHT]))
        ),
        limit=200,
    )
    running = {r.deployment_id: str(r.id) for r in busy}
    if not running:
        return []
    due = client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=list(running))),
        flow_run_filter=FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED])),
            expected_start_time=FlowRunFilterExpectedStartTime(before_=datetime.now(UTC) + timedelta(seconds=horizon_s)),
        ),
        limit=200,
    )
    out = []
    for r in due:
        if "run-now" in r.tags:
            continue
        client.delete_flow_run(r.id)
        out.append((str(r.deployment_id), _iso(r.expected_start_time) or "now", running[r.deployment_id]))
    return out


def catch_up(client, served: dict[str, dict], catch_up_runs: dict[str, int]) -> dict[str, dict]:
    """On start, after the deployments are registered: delete every Scheduled (or Late) run of a served campaign
    that is past due or carries parameters other than the deployment's (left by an earlier daemon or config),
    then start at most ``catch_up_runs[campaign]`` of the missed runs now, with today's parameters.

    ``served``: ``{campaign: parameters}`` as registered. Returns ``{campaign: {"removed": n, "missed": m,
    "started": k}}``.
    """
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    deps = {d.name: d for d in ratchet_deployments(client) if d.name in served}
    out = {}
    now = datetime.now(UTC)
    for name, dep in deps.items():
        removed = missed = 0
        while True:
            runs = client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dep.id])),
                flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))),
                limit=200,
            )
            doomed = [
                r for r in runs if (r.expected_start_time and r.expected_start_time <= now) or dict(r.parameters) != served[name]
            ]
            for r in doomed:
                missed += bool(r.expected_start_time and r.expected_start_time <= now)
                client.delete_flow_run(r.id)
            removed += len(doomed)
            if len(runs) < 200 or not doomed:
                break
        started = min(missed, catch_up_runs.get(name, 1))
        for _ in range(started):
            client.create_flow_run_from_deployment(dep.id, parameters=served[name], tags=[TAG, "catch-up"])
        out[name] = {"removed": removed, "missed": missed, "started": started}
    return out
