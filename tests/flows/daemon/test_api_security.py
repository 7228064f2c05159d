"""`ratchet up`'s Prefect API answers only its own UI: auth string, CORS, CSRF, trusted Host (a real server, ~20 s)."""

import base64
import os
import socket
import stat

import httpx
import pytest

from ratchet.flows.daemon.api import (
    AuthFileError,
    allowed_hosts,
    auth_path,
    load_or_create_auth,
    read_auth,
    ui_origins,
)

EVIL = "http://evil.example"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_auth_string_is_made_once_and_kept_private(tmp_path):
    a = load_or_create_auth(tmp_path)
    assert a.startswith("ratchet:") and len(a) > 40
    assert stat.S_IMODE(auth_path(tmp_path).stat().st_mode) == 0o600
    assert load_or_create_auth(tmp_path) == a == read_auth(tmp_path)
    auth_path(tmp_path).chmod(0o644)
    with pytest.raises(AuthFileError, match=r"mode 0644; run `chmod 600 "):
        read_auth(tmp_path)


def test_hosts_and_origins_are_the_bound_address_only():
    assert set(allowed_hosts("127.0.0.1")) == {"127.0.0.1", "localhost", "::1"}
    assert "evil.example" not in allowed_hosts("0.0.0.0") and socket.gethostname().lower() in allowed_hosts("0.0.0.0")
    assert ui_origins("127.0.0.1", 4200) == ["http://127.0.0.1:4200", "http://localhost:4200"]
    assert ui_origins("10.1.2.3", 80) == ["http://10.1.2.3:80"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real server as `ratchet up` starts it; yields (api_url, auth string, PREFECT_HOME)."""
    import os

    from ratchet.flows.daemon.server import prefect_server

    home = tmp_path_factory.mktemp("prefect-home")
    saved = {k: os.environ.pop(k, None) for k in ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING")}
    try:
        with prefect_server(_free_port(), home=home, startup_timeout_s=120) as url:
            yield url, read_auth(home), home
    finally:
        os.environ.update({k: v for k, v in saved.items() if v is not None})


def _basic(auth: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()}


def test_requests_without_the_auth_string_are_refused(server):
    url, auth, _ = server
    assert httpx.get(f"{url}/admin/settings").status_code == 401
    assert httpx.get(f"{url}/admin/settings", headers=_basic("ratchet:wrong")).status_code == 401
    assert httpx.get(f"{url}/csrf-token", params={"client": "evil"}).status_code == 401  # no token without auth
    assert httpx.post(f"{url}/flows/filter", json={}).status_code in (401, 403)
    assert httpx.get(f"{url}/health").status_code == 200  # liveness probes stay open


def test_a_rebinding_host_header_is_refused(server):
    url, auth, _ = server
    r = httpx.get(f"{url}/health", headers={"Host": "evil.example"})
    assert r.status_code == 400 and "Invalid host header" in r.text
    r = httpx.post(f"{url}/flows/filter", json={}, headers={"Host": "evil.example:4200", **_basic(auth)})
    assert r.status_code == 400


def test_cross_origin_requests_get_no_permission(server):
    url, auth, _ = server
    pre = {"Access-Control-Request-Method": "PATCH", "Access-Control-Request-Headers": "authorization,content-type"}
    r = httpx.options(f"{url}/deployments/00000000-0000-0000-0000-000000000000", headers={"Origin": EVIL, **pre})
    assert r.headers.get("access-control-allow-origin") not in (EVIL, "*")
    r = httpx.post(f"{url}/flows/filter", json={}, headers={"Origin": EVIL, **_basic(auth)})
    assert r.headers.get("access-control-allow-origin") not in (EVIL, "*")
    own = url.removesuffix("/api")
    r = httpx.options(f"{url}/flows/filter", headers={"Origin": own, **pre})
    assert r.headers.get("access-control-allow-origin") == own  # the UI's own origin still works


def test_state_changes_need_a_csrf_token(server):
    url, auth, _ = server
    r = httpx.post(f"{url}/flows/", json={"name": "csrf-probe"}, headers=_basic(auth))
    assert r.status_code == 403 and "CSRF" in r.text


def test_ratchets_own_client_works(server, monkeypatch):
    url, auth, home = server
    from prefect import flow

    from ratchet.flows.daemon.schedules import daemon_client, ratchet_deployments

    monkeypatch.setenv("PREFECT_HOME", str(home))  # where the CLI finds the auth file
    monkeypatch.delenv("PREFECT_API_AUTH_STRING", raising=False)

    @flow(name="api-security-probe")
    def probe():
        pass

    with daemon_client(url) as client:
        assert ratchet_deployments(client) == []
        run = client.create_flow_run(probe)  # a state-changing request: auth and CSRF token both sent
        assert client.read_flow_run(run.id).id == run.id


def test_ratchet_run_against_the_daemons_url_sends_its_auth(server, monkeypatch):
    url, auth, home = server
    from ratchet.flows.daemon.service import acquire_lock
    from ratchet.flows.settings import configure_prefect

    monkeypatch.setenv("PREFECT_HOME", str(home))
    monkeypatch.setenv("PREFECT_API_URL", url)
    monkeypatch.delenv("PREFECT_API_AUTH_STRING", raising=False)
    lock = acquire_lock(home / "ratchet-up.lock", {"pid": 1, "api_url": url}, "test")
    try:
        configure_prefect()
        assert os.environ["PREFECT_API_AUTH_STRING"] == auth
    finally:
        lock.release()
    monkeypatch.delenv("PREFECT_API_AUTH_STRING")
    configure_prefect()  # no daemon holds the lock: the URL is someone else's server, no auth sent
    assert "PREFECT_API_AUTH_STRING" not in os.environ
