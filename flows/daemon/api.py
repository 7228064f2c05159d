"""The daemon's Prefect API, locked to its own UI: auth string, CORS origins, CSRF, trusted Host headers.

Prefect 3.9's server defaults answer any web page (CORS ``*``, no auth, no CSRF check, any Host
header), so a page in the user's browser could change a deployment or start a flow run. ``ratchet up``
therefore starts the server through :func:`main` (``python -m ratchet.flows.daemon.api``) with:

- **auth**: Prefect's basic-auth string (``PREFECT_SERVER_API_AUTH_STRING`` on the server,
  ``PREFECT_API_AUTH_STRING`` on clients), generated once and kept ``0600`` in ``<PREFECT_HOME>/api-auth``
  (``$RATCHET_HOME/prefect/api-auth`` by default); every Ratchet client reads it from there;
- **CORS** limited to the UI's own origins (``http://host:port``, plus ``localhost``/``127.0.0.1`` on loopback);
- **CSRF** protection on (``PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED``; Prefect's clients fetch tokens);
- **Host** headers other than the bound address refused with 400 (DNS rebinding): Prefect has no
  setting for it, so its ASGI app is wrapped in Starlette's ``TrustedHostMiddleware``.

Only :func:`main` and :func:`create_app` import Prefect's server (in the server's own process).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
from pathlib import Path

from ratchet.common.files import atomic_write_text

AUTH_FILE = "api-auth"
AUTH_USER = "ratchet"
ALLOWED_HOSTS_ENV = "RATCHET_API_ALLOWED_HOSTS"  # comma-separated, read by create_app in the server process
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


class AuthFileError(RuntimeError):
    """The API auth file cannot be read or written; the message names the file and the fix."""


def auth_path(home: str | Path) -> Path:
    """``<home>/api-auth``: the daemon's API credential (``home`` is the server's PREFECT_HOME)."""
    return Path(home).expanduser() / AUTH_FILE


def read_auth(home: str | Path) -> str | None:
    """The stored auth string (``'ratchet:<token>'``), or None when there is none.

    Raises:
        AuthFileError: the file exists but is readable by others (mode not ``0600``) or cannot be read.
    """
    path = auth_path(home)
    try:
        mode = path.stat().st_mode & 0o777
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise AuthFileError(f"cannot read the API auth file {path} ({e}); delete it and restart `ratchet up`") from None
    if mode & 0o077:
        raise AuthFileError(f"the API auth file {path} has mode {mode:04o}; run `chmod 600 {path}` (or delete it)")
    return text or None


def load_or_create_auth(home: str | Path) -> str:
    """The stored auth string, generated (256 random bits) and written ``0600`` atomically on first use.

    Raises:
        AuthFileError: as :func:`read_auth`, or the file cannot be written.
    """
    found = read_auth(home)
    if found:
        return found
    path = auth_path(home)
    value = f"{AUTH_USER}:{secrets.token_urlsafe(32)}"
    try:
        atomic_write_text(path, value + "\n", mode=0o600)  # a private temporary, never readable by others, then a rename
    except OSError as e:
        raise AuthFileError(f"cannot write the API auth file {path} ({e.strerror}); make {path.parent} writable") from None
    return value


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _local_addresses() -> list[str]:
    import psutil

    return [
        a.address.split("%")[0]
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family in (socket.AF_INET, socket.AF_INET6)
    ]


def allowed_hosts(host: str) -> list[str]:
    """Host header values the server accepts when bound to ``host`` (ports are not compared).

    Loopback: the loopback names. A wildcard bind (``0.0.0.0``, ``::``): this machine's names and
    interface addresses. Any other address or name: itself plus the loopback names.
    """
    names = [host.strip("[]")]
    if host in ("0.0.0.0", "::", ""):
        names = [socket.gethostname(), socket.getfqdn(), *_local_addresses()]
    return list(dict.fromkeys(n.lower() for n in [*names, *LOOPBACK_NAMES] if n))


def ui_origins(host: str, port: int) -> list[str]:
    """Browser origins allowed to call the API cross-origin: the UI's own (``http://host:port``)."""
    names = [host] if host not in ("0.0.0.0", "::") else allowed_hosts(host)
    if is_loopback(host):
        names = [*names, "localhost", "127.0.0.1"]
    return list(dict.fromkeys(f"http://[{n}]:{port}" if ":" in n else f"http://{n}:{port}" for n in names))


def server_security_env(host: str, port: int, auth: str) -> dict[str, str]:
    """Environment for the server process: auth string, CSRF on, CORS to the UI origins, trusted hosts."""
    return {
        "PREFECT_SERVER_API_AUTH_STRING": auth,
        "PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED": "true",
        "PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS": ",".join(ui_origins(host, port)),
        ALLOWED_HOSTS_ENV: ",".join(allowed_hosts(host)),
    }


def create_app():
    """Prefect's server app (API, UI, services) behind ``TrustedHostMiddleware`` (hosts from ``RATCHET_API_ALLOWED_HOSTS``).

    Raises:
        RuntimeError: ``RATCHET_API_ALLOWED_HOSTS`` is unset or empty (the server would accept any Host).
    """
    from prefect.server.api.server import create_app as prefect_app
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    hosts = [h for h in os.environ.get(ALLOWED_HOSTS_ENV, "").split(",") if h]
    if not hosts:
        raise RuntimeError(f"{ALLOWED_HOSTS_ENV} is empty; start the server with `ratchet up`, which sets it")
    return TrustedHostMiddleware(prefect_app(final=True), allowed_hosts=hosts, www_redirect=False)


def main(argv: list[str] | None = None) -> None:
    """``python -m ratchet.flows.daemon.api --host H --port P``: serve :func:`create_app` with uvicorn."""
    import argparse

    import uvicorn
    from prefect.settings import (
        PREFECT_SERVER_API_KEEPALIVE_TIMEOUT,
        PREFECT_SERVER_API_WEBSOCKET_PING_INTERVAL,
        PREFECT_SERVER_API_WEBSOCKET_PING_TIMEOUT,
        PREFECT_SERVER_LOGGING_LEVEL,
    )

    p = argparse.ArgumentParser(prog="python -m ratchet.flows.daemon.api")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    a = p.parse_args(argv)
    uvicorn.run(
        create_app(),
        host=a.host,
        port=a.port,
        timeout_keep_alive=PREFECT_SERVER_API_KEEPALIVE_TIMEOUT.value(),
        ws_ping_interval=PREFECT_SERVER_API_WEBSOCKET_PING_INTERVAL.value(),
        ws_ping_timeout=PREFECT_SERVER_API_WEBSOCKET_PING_TIMEOUT.value(),
        log_level=PREFECT_SERVER_LOGGING_LEVEL.value().lower(),
    )


if __name__ == "__main__":
    main()
