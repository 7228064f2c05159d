"""The Prefect APIs Ratchet starts answer only their own UI: auth string, CORS, CSRF, trusted Host (real servers,
~20 s each): `ratchet up`'s, and the one a server-less `ratchet run` / `demo` / `sweep` starts (issue 36, class 4)."""

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


@pytest.fixture(scope="module", params=["up", "run"])
def server(request, tmp_path_factory):
    """A real server as `ratchet up` starts it, or as a server-less `ratchet run` does (``campaign_api``, what
    ``run``, ``demo`` and ``sweep`` run inside); yields (api_url, auth string, PREFECT_HOME)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from ratchet.flows.cli.running.run_commands import campaign_api
    from ratchet.flows.daemon.run_server import drain_prefect_workers
    from ratchet.flows.daemon.server import prefect_server

    home = tmp_path_factory.mktemp("prefect-home")
    keys = ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING", "PREFECT_HOME", "PREFECT_SERVER_EPHEMERAL_ENABLED")
    saved = {k: os.environ.pop(k, None) for k in keys}
    try:
        if request.param == "up":
            with prefect_server(_free_port(), home=home, startup_timeout_s=120) as url:
                yield url, read_auth(home), home
                drain_prefect_workers()  # the flow test's logs, before the server goes
        else:
            os.environ["PREFECT_HOME"] = str(home)
            with temporary_settings(restore_defaults={PREFECT_API_URL}), campaign_api() as url:  # no server to use
                assert os.environ["PREFECT_API_URL"] == url == PREFECT_API_URL.value() and url.startswith("http://127.0.0.1:")
                assert os.environ["PREFECT_API_AUTH_STRING"] == read_auth(home)
                assert os.environ["PREFECT_SERVER_EPHEMERAL_ENABLED"] == "false"  # no unlocked server behind it
                yield url, read_auth(home), home
            assert "PREFECT_API_URL" not in os.environ and not _answers(url)  # stopped, the environment restored
            assert not list(home.glob("run-db-*")) and not (home / "prefect.db").exists()  # its own database, removed
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v


def _answers(url: str) -> bool:
    try:
        httpx.get(f"{url}/health", timeout=2)
        return True
    except httpx.HTTPError:
        return False


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
    if os.environ.get("PREFECT_API_URL") == url:
        pytest.skip("the run's own server: its client already has the auth string (checked in the fixture)")
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


def test_a_flow_with_a_task_runs_on_it(server):
    """What a round does: Prefect's flow engine (auth string, CSRF tokens) records a flow and its task on the API."""
    url, auth, _ = server
    from prefect import flow, task
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    @task
    def add(a: int, b: int) -> int:
        return a + b

    @flow(name="api-security-round")
    def round_like() -> int:
        return add(1, 2)

    with temporary_settings(updates={PREFECT_API_URL: url, PREFECT_API_AUTH_STRING: auth}):
        state = round_like(return_state=True)
        assert state.is_completed() and state.result() == 3
        with get_client(sync_client=True) as client:
            assert client.read_flow_run(state.state_details.flow_run_id).state.is_completed()
