"""Process-wide settings that must be in place before Prefect is imported."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ratchet.loop.checkpoints import ratchet_home


def configure_prefect(quiet_console: bool = True) -> None:
    """Telemetry off, Prefect's home under ``$RATCHET_HOME/prefect`` unless the user chose one.

    ``quiet_console`` keeps Prefect's INFO run logs out of the terminal (they still reach the API and
    the UI) so the CLI's progress bars stay readable.
    """
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_HOME", str(ratchet_home() / "prefect"))
    try:  # Prefect creates only the last path component itself; a fresh $RATCHET_HOME needs its parents
        Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # Prefect then warns once and still runs (seen with a fresh, not yet created RATCHET_HOME)
    # The ephemeral API (a `ratchet run` without a server) starts a uvicorn subprocess; on a loaded machine it
    # can take longer than Prefect's 20 s default to answer, which failed whole runs before any work started.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    # ...but none is started: Prefect's ephemeral server answers any local user and any web page (no auth, CORS *,
    # any Host). A run without a server starts a locked one instead (ratchet.flows.daemon.run_server.run_api).
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_ENABLED", "false")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub here; cached HF ids still resolve
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # library tqdm bars would tear through the CLI's rich progress
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    _daemon_auth()
    if quiet_console:
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_FLOW_RUNS_LEVEL", "WARNING")
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_TASK_RUNS_LEVEL", "WARNING")


def _daemon_auth() -> None:
    """With ``PREFECT_API_URL`` pointing at the running ``ratchet up``, send its auth string (``ratchet run`` against it)."""
    url = os.environ.get("PREFECT_API_URL", "").rstrip("/")
    if not url or os.environ.get("PREFECT_API_AUTH_STRING"):
        return
    from ratchet.flows.daemon.api import AuthFileError, read_auth
    from ratchet.flows.daemon.schedules import running_daemon, state_path

    state = running_daemon() or {}
    if (state.get("api_url") or "").rstrip("/") != url:
        return  # another server: its auth, if any, is the user's PREFECT_API_AUTH_STRING
    try:
        auth = read_auth(state_path().parent)
    except AuthFileError as e:
        logging.getLogger(__name__).warning("%s", e)  # the API then answers 401
        return
    if auth:
        os.environ["PREFECT_API_AUTH_STRING"] = auth
