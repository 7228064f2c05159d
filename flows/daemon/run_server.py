"""The Prefect API of a one-off campaign run (``ratchet run`` and ``ratchet demo`` without a server, ``ratchet sweep``).

Prefect's own answer to "no ``PREFECT_API_URL``" is an ephemeral server (``SubprocessASGIServer``): uvicorn on
127.0.0.1 with Prefect 3.9's defaults, so any local user and any web page in the user's browser could read and
change its runs (no auth, ``access-control-allow-origin: *``, any ``Host``, no CSRF check). Instead, a run starts
the server ``ratchet up`` starts (``ratchet.flows.daemon.server.prefect_server``, locked by
``ratchet.flows.daemon.api``: auth string, CORS to its own origin, CSRF, trusted ``Host`` headers), on a free
loopback port, with the ephemeral server's lighter services and no UI, and turns Prefect's ephemeral mode off
while it runs, so no unlocked server can appear behind it.

The run's server keeps its database in a fresh private folder, removed when the run ends. A shared database
would outlive the server but not its leases: Prefect keeps a global concurrency slot's lease in the server's
memory, so a run killed with ``kill -9`` (its server dies with it) would leave its device slots
(``ratchet.flows.compute.slots``) taken for every later run. Flow-run history that outlives a run needs a
server that outlives it: ``ratchet up``, or your own with ``PREFECT_API_URL``.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ratchet.flows.daemon.api import read_auth
from ratchet.flows.daemon.server import prefect_server

# The ephemeral server's settings for a run's own server: services an ephemeral server runs, no UI.
RUN_SERVER_ENV = {"PREFECT__SERVER_EPHEMERAL": "1", "PREFECT_UI_ENABLED": "false"}
_CLIENT_ENV = ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING", "PREFECT_SERVER_EPHEMERAL_ENABLED")


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prefect_home() -> Path:
    """The Prefect home a run's server uses: ``$PREFECT_HOME``, else ``$RATCHET_HOME/prefect`` (as ``ratchet up``'s)."""
    from ratchet.loop.checkpoints import ratchet_home

    return Path(os.environ.get("PREFECT_HOME") or ratchet_home() / "prefect").expanduser()


@contextmanager
def run_api(startup_timeout_s: float = 180.0) -> Iterator[str]:
    """Yield the URL of the Prefect API a campaign run talks to, locked like ``ratchet up``'s.

    When Prefect already has an API URL (``PREFECT_API_URL``, a profile's, a running ``ratchet up``'s or a test
    harness's), that server is used as it is. Otherwise a locked server is started for the block (auth string in
    ``<PREFECT_HOME>/api-auth``, shared with ``ratchet up``; its database in a private folder removed afterwards),
    Prefect's settings and this process's environment point at it with its auth string and ephemeral mode off, and
    on exit Prefect's queued logs are sent, the server is stopped and both are restored.

    Raises:
        ServerError: the server cannot start (``ratchet.flows.daemon.server.prefect_server``).
    """
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        yield PREFECT_API_URL.value()
        return
    home = prefect_home()
    home.mkdir(parents=True, exist_ok=True)
    db_dir = Path(tempfile.mkdtemp(prefix="run-db-", dir=home))  # 0700
    database_url = f"sqlite+aiosqlite:///{db_dir / 'prefect.db'}"
    env = {**RUN_SERVER_ENV, "PREFECT_SERVER_DATABASE_CONNECTION_URL": database_url}  # both names of the setting
    try:
        with prefect_server(
            free_loopback_port(), home=home, database_url=database_url, startup_timeout_s=startup_timeout_s, extra_env=env
        ) as url:
            with _pointed_at(url, read_auth(home)):
                yield url
    finally:
        shutil.rmtree(db_dir, ignore_errors=True)


@contextmanager
def _pointed_at(url: str, auth: str | None) -> Iterator[None]:
    """Prefect's settings and this process's environment point at ``url`` (with ``auth``) inside the block."""
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED, temporary_settings

    saved = {k: os.environ.get(k) for k in _CLIENT_ENV}
    os.environ.update(PREFECT_API_URL=url, PREFECT_API_AUTH_STRING=auth or "", PREFECT_SERVER_EPHEMERAL_ENABLED="false")
    updates = {PREFECT_API_URL: url, PREFECT_API_AUTH_STRING: auth, PREFECT_SERVER_EPHEMERAL_ENABLED: False}
    try:
        with temporary_settings(updates=updates):
            try:
                yield
            finally:
                drain_prefect_workers()  # else they retry the stopped server at exit, for minutes
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def drain_prefect_workers() -> None:
    """Send the run logs and events still queued in this process (at most 5 s each) before the server goes away."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        worker.drain_all(timeout=5)
