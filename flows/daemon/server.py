"""A real Prefect server for ``ratchet up``: start it as a child process group, wait until healthy, stop it.

Schedules need a real server (the ephemeral API runs no scheduler and serves no UI). It is Prefect's
own app, started by ``python -m ratchet.flows.daemon.api`` so that it only answers its own UI: auth
string, CSRF, CORS origins and trusted Host headers (see ``ratchet.flows.daemon.api``). The server keeps its database under ``PREFECT_HOME`` (``$RATCHET_HOME/prefect/prefect.db``,
SQLite) unless a PostgreSQL URL is given. This module does not import Prefect, so a caller can
start the server before Prefect reads its settings; use :func:`prefect_server`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from ratchet.common.procs import kill_tree
from ratchet.flows.daemon.api import AuthFileError, is_loopback, load_or_create_auth, server_security_env

logger = logging.getLogger(__name__)


class ServerError(RuntimeError):
    """The Prefect server cannot be started or reached; the message says why and what to do."""


def api_healthy(api_url: str, timeout_s: float = 1.0) -> bool:
    """True when ``GET <api_url>/health`` answers 200 within ``timeout_s`` seconds (never raises)."""
    try:
        return httpx.get(f"{api_url.rstrip('/')}/health", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def server_env(home: Path, database_url: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of the server process: its home, telemetry off, the database URL when given."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(home), DO_NOT_TRACK="1", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    if database_url:
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = database_url
    env.update(extra or {})
    return env


def _die_with_parent() -> None:
    """In the child (Linux): get SIGTERM when the parent dies, even by SIGKILL, so no server outlives its daemon."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def stop_process_group(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGTERM the child's process group and descendants, then SIGKILL what is left after ``grace_s`` seconds; reaps it."""
    kill_tree(proc, grace_s=grace_s)


@contextmanager
def prefect_server(
    port: int = 4200,
    *,
    host: str = "127.0.0.1",
    home: str | Path | None = None,
    database_url: str | None = None,
    startup_timeout_s: float = 120.0,
    extra_env: dict[str, str] | None = None,
    pid_out: list[int] | None = None,
) -> Iterator[str]:
    """Yield the API URL (``http://host:port/api``) of a healthy Prefect server.

    When ``PREFECT_API_URL`` is set, that server is used as is (nothing is started or stopped).
    Otherwise the server runs in its own process group with ``PREFECT_HOME=home`` (default:
    ``$PREFECT_HOME``, else ``$RATCHET_HOME/prefect``), telemetry off, the database at
    ``database_url`` (PostgreSQL ``postgresql+asyncpg://...``) or SQLite under ``home``, API auth
    with the string of ``<home>/api-auth`` (created ``0600`` if absent; clients read it with
    ``ratchet.flows.daemon.api.read_auth(home)``), CSRF on, CORS and Host headers limited to
    ``host``; a non-loopback ``host`` logs a warning. Its output goes to ``<home>/server.log``; its
    pid (= its process group id) is appended to ``pid_out``. On exit the whole group gets SIGTERM,
    then SIGKILL.

    Raises:
        ServerError: the port is taken, the auth file cannot be made, the server exits early or is not healthy within
            ``startup_timeout_s`` seconds, or an external ``PREFECT_API_URL`` does not answer.
    """
    external = os.environ.get("PREFECT_API_URL")
    if external:
        if not api_healthy(external, timeout_s=5.0):
            raise ServerError(
                f"PREFECT_API_URL={external} does not answer {external.rstrip('/')}/health; "
                "start that server, or unset PREFECT_API_URL to let Ratchet start its own"
            )
        yield external.rstrip("/")
        return
    home, auth = _prepare_home(home, host, port)
    url_host = f"[{host}]" if ":" in host else host
    api_url = f"http://{url_host}:{port}/api"
    log_path = home / "server.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ratchet.flows.daemon.api", "--host", host, "--port", str(port)],
            # the UI's browser code calls the API at PREFECT_UI_API_URL (default port 4200)
            env=server_env(
                home,
                database_url,
                {"PREFECT_UI_API_URL": api_url, **server_security_env(host, port, auth), **(extra_env or {})},
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    if pid_out is not None:
        pid_out.append(proc.pid)
    try:
        _wait_healthy(proc, api_url, startup_timeout_s, log_path)
        logger.info("Prefect server pid %d at %s (home %s)", proc.pid, api_url, home)
        yield api_url
    finally:
        stop_process_group(proc)


def _prepare_home(home: str | Path | None, host: str, port: int) -> tuple[Path, str]:
    """The server's Prefect home (created) and API auth string, after checking that ``host:port`` is free.

    Raises:
        ServerError: the port is taken, or the auth file cannot be made.
    """
    if home is None:
        from ratchet.loop.checkpoints import ratchet_home

        home = os.environ.get("PREFECT_HOME") or ratchet_home() / "prefect"
    home = Path(home).expanduser()
    home.mkdir(parents=True, exist_ok=True)
    if not _port_free(host, port):
        raise ServerError(
            f"port {port} on {host} is already in use; pass --port with a free port, or point "
            f"PREFECT_API_URL at the server already listening there"
        )
    try:
        auth = load_or_create_auth(home)
    except AuthFileError as e:
        raise ServerError(str(e)) from None
    if not is_loopback(host):
        logger.warning(
            "the Prefect API and UI listen on %s, reachable from other machines (auth string in %s); "
            "bind to 127.0.0.1 unless you mean it",
            host,
            home / "api-auth",
        )
    return home, auth


def _wait_healthy(proc: subprocess.Popen, api_url: str, timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
            raise ServerError(f"the Prefect server exited with code {proc.returncode}: {' | '.join(tail)} (full log: {log_path})")
        if api_healthy(api_url):
            return
        time.sleep(0.5)
    raise ServerError(f"Prefect server at {api_url} not healthy after {timeout_s:.0f} s; see {log_path}")
