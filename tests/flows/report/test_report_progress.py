"""Progress artifacts driven by the stages' ``bar(...)`` callbacks (flows/progress.py), against a real Prefect API."""

import threading
import time
import warnings

from ratchet.flows.rounds.observe.progress import RunProgress, bar, in_run_context, set_reporter


class Recorder:
    def __init__(self):
        self.updates = []

    def update(self, key, description, done, total):
        self.updates.append((key, done, total))

    def message(self, text):
        pass


def _progress_artifacts(flow_run_id):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterType

    with get_client(sync_client=True) as client:
        return client.read_artifacts(
            artifact_filter=ArtifactFilter(
                type=ArtifactFilterType(any_=["progress"]), flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])
            )
        )


def test_outside_a_run_only_the_reporter_is_driven():
    rec = Recorder()
    set_reporter(rec)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # Prefect warns when an artifact is made outside a run: none may be made
            cb = bar("k", "round 1: rollouts")
            for i in range(5):
                cb(i + 1, 5)
    finally:
        set_reporter(None)
    assert not in_run_context() and rec.updates == [("k", i + 1, 5) for i in range(5)]


def test_in_a_flow_one_artifact_per_bar_updated_sparingly(prefect_harness):
    from prefect import flow
    from prefect.context import get_run_context

    calls = {}

    @flow
    def stage():
        gen = RunProgress("round 1: rollouts")
        t0 = time.perf_counter()
        for i in range(1, 2001):  # a callback per token would look like this
            gen(i, 2000)
        calls["rollouts"], calls["seconds"] = gen.calls, time.perf_counter() - t0
        train = RunProgress("round 1: rft", min_interval_s=0.0, min_step_pct=25.0)
        for s in range(1, 11):
            train(s, 10)
        calls["rft"] = train.calls
        return get_run_context().flow_run.id

    run_id = stage()
    # First and last update only: 2000 callbacks in well under MIN_INTERVAL_S.
    assert calls["rollouts"] == 2 and calls["seconds"] < 2.0
    assert calls["rft"] == 4  # 10 %, then >= 25 points on: 40, 70, and the final 100 always
    arts = {a.description: a.data for a in _progress_artifacts(run_id)}
    assert arts == {"round 1: rollouts": 100.0, "round 1: rft": 100.0}


def test_bar_called_from_another_thread_lands_on_its_run(prefect_harness):
    from prefect import flow
    from prefect.context import get_run_context

    @flow
    def stage():
        cb = bar("k", "round 2: eval samples")  # made in the run, called back from a worker thread
        t = threading.Thread(target=lambda: [cb(i, 4) for i in range(5)])
        t.start()
        t.join()
        return get_run_context().flow_run.id

    run_id = stage()
    assert [(a.description, a.data) for a in _progress_artifacts(run_id)] == [("round 2: eval samples", 100.0)]


RUN_API_THREAD = r"""
import threading
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterType
from ratchet.flows.daemon.run_server import run_api
from ratchet.flows.rounds.observe.progress import bar

@flow
def stage():
    cb = bar("k", "round 1: rollouts")
    cb(0, 4)  # created here, in the run
    t = threading.Thread(target=lambda: [cb(i, 4) for i in range(1, 5)])  # updated from a reader thread, as ranks' lines are
    t.start()
    t.join()

with run_api():
    stage()
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(type=ArtifactFilterType(any_=["progress"])))
    print("DATA", [(a.description, a.data) for a in arts])
"""


def test_updates_from_another_thread_reach_a_runs_own_locked_server(tmp_path):
    """A run without a server gets its own locked one, whose URL is a Prefect setting of the run's context: an update
    from a thread without that context (an engine rank's output reader) once raised 'No Prefect API URL provided' and
    killed the reader (seen in a real `ratchet run`)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"PREFECT_HOME": str(tmp_path / "prefect"), "DO_NOT_TRACK": "1"}
    p = subprocess.run([sys.executable, "-c", RUN_API_THREAD], capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "DATA [('round 1: rollouts', 100" in p.stdout, p.stdout + p.stderr[-3000:]
    assert "not updating it again" not in p.stderr, p.stderr[-3000:]
