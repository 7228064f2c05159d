"""The Prefect UI shows a round: a real `prefect server start`, one tiny-model round against it, headless Chromium.

Chromium is Debian's `chromium` package (CI installs it, see .ci/run); the test skips only when it is
absent. Screenshots go under the test's tmp dir and, when /work/notes exists, to
/work/notes/ui-screenshot.png (artifacts tab) and /work/notes/ui-screenshot-gate.png (gate artifact).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet.loop.campaign.round_context import load_ctx
from tests.flows.report.test_report_flow import tiny_config_file

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
NOTES = (
    Path(os.environ["RATCHET_SCREENSHOT_DIR"]) if os.environ.get("RATCHET_SCREENSHOT_DIR") else None
)  # keep the screenshot there
TIMEOUT_MS = 90_000  # the UI's first load on a busy 2-core machine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prefect_server_url(tmp_path, monkeypatch):
    """A real Prefect server (UI included, API auth on) on a free port with its own PREFECT_HOME; yields (API URL, auth)."""
    from ratchet.flows.daemon.api import read_auth
    from ratchet.flows.daemon.server import prefect_server

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    port = _free_port()
    # The UI asks the API at PREFECT_UI_API_URL (default: port 4200): prefect_server points it at this port.
    with prefect_server(port, home=tmp_path / "prefect-home", startup_timeout_s=240) as url:
        yield url, read_auth(tmp_path / "prefect-home")


def _save(page, tmp_path: Path, name: str, notes_name: str) -> Path:
    shot = tmp_path / name
    page.screenshot(path=str(shot), full_page=True)
    if NOTES is not None and NOTES.is_dir():
        shutil.copyfile(shot, NOTES / notes_name)
    return shot


@pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="Debian's chromium is not installed (/usr/bin/chromium): apt-get install -y chromium chromium-driver",
)
def test_round_artifacts_in_the_prefect_ui(prefect_server_url, tiny_model_dir, tmp_path):
    from playwright.sync_api import expect, sync_playwright
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    prefect_server_url, auth = prefect_server_url
    cfg = tiny_config_file(tmp_path, tiny_model_dir, campaign="tiny-ui", algorithm="rft", **{"sft.epochs": 1, "sft.lr": 1e-4})
    # The round runs in its own process, as under `ratchet up`: Prefect's in-process log and event
    # workers then never outlive this server (they would retry it from later tests' harness).
    code = (
        "import json, sys; from ratchet.flows.rounds.campaign import run_campaign; print(json.dumps(run_campaign(sys.argv[1])))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(cfg)],
        env={**os.environ, "PREFECT_API_URL": prefect_server_url, "PREFECT_API_AUTH_STRING": auth},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (decision,) = [d["decision"] for d in json.loads(proc.stdout.strip().splitlines()[-1])]
    with temporary_settings(updates={PREFECT_API_URL: prefect_server_url, PREFECT_API_AUTH_STRING: auth}):
        with get_client(sync_client=True) as client:
            (run,) = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=["tiny-ui round-1"])))
    ui = prefect_server_url.removesuffix("/api")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(
                viewport={"width": 1400, "height": 2000}
            )  # the UI scrolls inside the page: a tall view shows every card
            page.set_default_timeout(TIMEOUT_MS)
            # what the UI's login page stores when the user pastes the auth string (<PREFECT_HOME>/api-auth)
            page.add_init_script(f"localStorage.setItem('prefect-password', btoa({json.dumps(auth)}))")
            page.goto(f"{ui}/runs/flow-run/{run.id}", wait_until="networkidle")
            page.locator("li.p-tab", has_text="Artifacts").click()
            for key in ("tiny-ui-round-1-metrics", "tiny-ui-round-1-gate", "tiny-ui-round-1-verifier"):
                expect(page.get_by_text(key, exact=True).first).to_be_visible()
            expect(page.get_by_text("round 1: rollouts").first).to_be_visible()  # generation's progress artifact
            shot = _save(page, tmp_path, "ui-artifacts.png", "ui-screenshot.png")
            # The gate decision, with the pass@1 plot embedded as a data URI image that the UI renders.
            page.get_by_text("tiny-ui-round-1-gate", exact=True).first.click()
            expect(page.get_by_role("heading", name=f"Round 1: {decision}")).to_be_visible()
            img = page.locator('img[src^="data:image/png;base64,"]')
            expect(img).to_be_visible()
            assert img.evaluate("e => e.complete && e.naturalWidth") == 800
            _save(page, tmp_path, "ui-gate.png", "ui-screenshot-gate.png")
            # The metrics table: held-out and rollout metrics by name.
            page.go_back(wait_until="networkidle")
            page.locator("li.p-tab", has_text="Artifacts").click()
            page.get_by_text("tiny-ui-round-1-metrics", exact=True).first.click()
            for metric in ("heldout/pass@1", "rollout/pass@1", "rollout/completion_tokens_p90", "heldout/completion_tokens_p90"):
                expect(page.get_by_text(metric, exact=True).first).to_be_visible()
            _save(page, tmp_path, "ui-metrics.png", "ui-screenshot-metrics.png")
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
    assert load_ctx(cfg, 1).stage_dir("generate").is_dir()
