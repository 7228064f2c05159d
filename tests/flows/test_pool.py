"""The device pool: sharded generation in worker processes, timeouts, output streaming, orphan cleanup."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager

import pyarrow.parquet as pq
import pytest

from ratchet.flows.compute.pool import Child, StageTimeout, WorkerFailed, run_children, worker_groups
from ratchet.flows.compute.protocol import PROGRESS_PREFIX
from ratchet.flows.compute.slots import slot_names
from ratchet.loop.campaign.round_context import load_ctx, save_config
from ratchet.loop.config import ConfigError, load_config
from ratchet.loop.generation.base import SamplingParams, shard_jobs
from ratchet.loop.generation.transformers_backend import TransformersBackend
from ratchet.loop.tasks.sources import chat_messages
from tests.flows.test_round import tiny_config  # noqa: F401 - fixture

PY = sys.executable


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


# --- sharding -------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_prompts,n,shards,align", [(12, 2, 2, 6), (7, 3, 2, 4), (5, 4, 3, 4), (1, 1, 4, 32), (10, 3, 4, 3)])
def test_shard_jobs_cover_every_job_once_on_aligned_bounds(n_prompts, n, shards, align):
    got = shard_jobs(n_prompts, n, shards, align)
    total = n_prompts * n
    assert [j for r in got for j in r] == list(range(total))
    assert 1 <= len(got) <= shards and all(len(r) for r in got)
    assert all(r.start % align == 0 and (r.stop % align == 0 or r.stop == total) for r in got)
    units = [-(-len(r) // align) for r in got]
    assert max(units) - min(units) <= 1  # balanced


def test_transformers_shards_merge_into_the_whole_call(tiny_model_dir):
    """Sampling is seeded per batch position, so running the batches in two pieces changes nothing."""
    b = TransformersBackend(tiny_model_dir, batch_size=4)
    msgs = [chat_messages("sys", [], f"What is {i} + {i + 2}?") for i in range(7)]
    params = SamplingParams(n=3, temperature=1.2, max_new_tokens=6, seed=5)
    whole = b.generate(msgs, params)
    parts = [c for r in shard_jobs(7, 3, 2, 4) for c in b.generate(msgs, params, jobs=r)]
    assert parts == whole
    with pytest.raises(ValueError, match="multiples of 4"):
        b.generate(msgs, params, jobs=range(2, 8))


def test_worker_groups_and_slot_names():
    assert worker_groups(("cuda:0", "cuda:1", "cuda:2", "cuda:3"), 2) == [("cuda:0", "cuda:1"), ("cuda:2", "cuda:3")]
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        worker_groups(("cuda:0", "cuda:1", "cuda:2"), 2)
    assert slot_names(("cpu", "cpu")) == ["ratchet-device-cpu-0", "ratchet-device-cpu-1"]
    assert slot_names(("cuda:3",)) == ["ratchet-device-cuda-3"]


def test_compute_config_rules_and_not_a_campaign_setting():
    cfg = load_config(None, **{"compute.devices": "cuda:1"})
    assert cfg.compute.devices == ("cuda:1",) and cfg.compute.on_gpu
    assert "compute" not in cfg.campaign_settings()
    assert "tensor_parallel_size" not in cfg.campaign_settings()["generation"]
    for bad, rule in [
        ("gpu0", "'cpu' or 'cuda:<index>'"),
        (["cpu", "cuda:0"], "mixes cpu and cuda"),
        (["cuda:0", "cuda:0"], "lists a GPU twice"),
    ]:
        with pytest.raises(ConfigError, match=rule):
            load_config(None, **{"compute.devices": bad})
    with pytest.raises(ConfigError, match="tensor_parallel_size"):
        load_config(None, **{"compute.devices": ["cuda:0", "cuda:1", "cuda:2"], "generation.tensor_parallel_size": 2})


@contextmanager
def _captured(caplog):
    """Attach caplog's handler to the stage logger itself: Prefect's logging setup may replace the root handlers."""
    lg = logging.getLogger("ratchet.flows")
    lg.addHandler(caplog.handler)
    try:
        yield
    finally:
        lg.removeHandler(caplog.handler)


# --- the generate stage over two CPU workers ------------------------------------------------------


def test_two_cpu_workers_generate_the_same_rollouts_as_one(prefect_harness, tiny_config, tiny_model_dir, caplog):  # noqa: F811
    """Two `cpu` workers each generate half of the round's jobs; the merged rollouts equal one engine's whole call."""
    from ratchet.flows.rounds.campaign import prepare_campaign, start_round
    from ratchet.flows.rounds.stages import generate

    base = load_ctx(tiny_config).cfg
    cfg = base.model_copy(
        update={
            "campaign": "pool-2",
            "generation": base.generation.model_copy(update={"batch_size": 6}),
            "compute": base.compute.model_copy(update={"devices": ("cpu", "cpu")}),
        }
    )
    path = str(save_config(cfg))
    prepare_campaign.fn(path)
    start_round.fn(path, 1)
    with caplog.at_level(logging.INFO, logger="ratchet.flows"), _captured(caplog):
        parquet = generate.fn(path, 1)
    merged = [
        (r["sample_index"], r["completion"], r["completion_tokens"], r["finish_reason"])
        for r in pq.read_table(parquet).to_pylist()
    ]
    ctx, g = load_ctx(path, 1), cfg.generation
    params = SamplingParams(
        n=g.group_size, temperature=g.temperature, top_p=g.top_p, max_new_tokens=g.max_new_tokens, seed=g.seed * 1_000_003 + 1
    )  # as the generate stage derives it for round 1
    one = TransformersBackend(tiny_model_dir, batch_size=6).generate([ctx.messages(p) for p in ctx.train_prompts()], params)
    assert len(merged) == 12 * 2
    assert merged == [(c.sample_index, c.text, c.completion_tokens, c.finish_reason) for c in one]
    log = caplog.text
    assert "generate worker 0 [cpu] rollouts jobs 0-12" in log and "generate worker 1 [cpu] rollouts jobs 12-24" in log
    # each child's own log lines reached the stage's logger
    assert "rollouts: jobs 12-24" in log and "loaded transformers backend on cpu" in log
    # Crash after worker 0 finished, before the stage did: a re-run starts only the worker whose shard is missing.
    stage_dir = ctx.stage_dir("generate")
    (stage_dir / "_SUCCESS.json").unlink()
    shards = sorted((stage_dir / "shards").glob("*-rollouts-*.parquet"))
    assert [f.name.rsplit("-", 1)[1] for f in shards] == ["0.parquet", "1.parquet"]
    shards[1].unlink()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ratchet.flows"), _captured(caplog):
        generate.fn(path, 1)
    assert "generate worker 1 [cpu]" in caplog.text and "generate worker 0 [cpu]" not in caplog.text
    again = [
        (r["sample_index"], r["completion"], r["completion_tokens"], r["finish_reason"])
        for r in pq.read_table(parquet).to_pylist()
    ]
    assert again == merged


# --- run_children: timeout, streaming, failure, orphans ------------------------------------------


def test_child_past_its_timeout_is_killed_with_its_group_and_a_clear_error(tmp_path):
    script = textwrap.dedent("""
        import subprocess, sys, time
        g = subprocess.Popen(["sleep", "60"])
        print(f"grandchild {g.pid}", flush=True)
        time.sleep(60)
    """)
    seen = []

    class Grab(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    log = logging.getLogger("test-pool-timeout")
    log.addHandler(Grab())
    log.setLevel(logging.INFO)
    t0 = time.monotonic()
    with pytest.raises(
        StageTimeout, match=r"stage 'generate'.*compute\.generate_timeout_s = 1\.5 s.*raise compute\.generate_timeout_s"
    ):
        run_children(
            [Child("worker 0 [cpu]", [PY, "-c", script])],
            stage="generate",
            timeout_s=1.5,
            timeout_key="compute.generate_timeout_s",
            log=log,
        )
    assert time.monotonic() - t0 < 8
    gpid = int(next(m for m in seen if m.startswith("[worker 0 [cpu]] grandchild")).split()[-1])
    deadline = time.monotonic() + 5
    while _alive(gpid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(gpid), "the child's own child survived the timeout"


def test_child_output_reaches_the_logger_and_progress_is_summed(caplog):
    def script(k):
        return textwrap.dedent(f"""
            import json, sys
            print("INFO ratchet.flows.compute.worker: hello from {k}", flush=True)
            print("WARNING some.lib: careful {k}", file=sys.stderr, flush=True)
            print({PROGRESS_PREFIX!r} + json.dumps({{"bar": "rollouts", "done": 3, "total": 4}}), flush=True)
            print("a plain line {k}", flush=True)
        """)

    got = []
    with caplog.at_level(logging.INFO, logger="test-pool-stream"):
        run_children(
            [Child(f"w{k}", [PY, "-c", script(k)]) for k in range(2)],
            stage="generate",
            timeout_s=60,
            timeout_key="compute.generate_timeout_s",
            log=logging.getLogger("test-pool-stream"),
            progress=lambda bar, done, total: got.append((bar, done, total)),
        )
    msgs = [(r.levelno, r.getMessage()) for r in caplog.records]
    for k in range(2):
        assert (logging.INFO, f"[w{k}] INFO ratchet.flows.compute.worker: hello from {k}") in msgs
        assert (logging.WARNING, f"[w{k}] WARNING some.lib: careful {k}") in msgs
        assert (logging.INFO, f"[w{k}] a plain line {k}") in msgs
    assert not any(PROGRESS_PREFIX.strip() in m for _, m in msgs if "] started (pid" not in m)
    assert got[-1] == ("rollouts", 6, 8)


def test_failed_child_raises_with_the_end_of_its_output():
    script = "import sys; print('loading'); print('ValueError: boom', flush=True); sys.exit(3)"
    with pytest.raises(WorkerFailed, match=r"(?s)stage 'train': trainer exited with status 3.*ValueError: boom"):
        run_children(
            [Child("trainer", [PY, "-c", script])],
            stage="train",
            timeout_s=60,
            timeout_key="compute.train_timeout_s",
            log=logging.getLogger("test-pool-fail"),
        )


def test_worker_dies_when_the_round_process_is_killed(tmp_path):
    """kill -9 of the process running the pool (not of the group) still ends the worker and its children."""
    child = (
        "import subprocess, time; from ratchet.flows.compute.worker import exit_with_parent; exit_with_parent(); "
        "g = subprocess.Popen(['sleep', '60']); print('pids', __import__('os').getpid(), g.pid, flush=True); time.sleep(60)"
    )
    parent = textwrap.dedent(f"""
        import logging, sys
        logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(message)s")
        from ratchet.flows.compute.pool import Child, run_children
        run_children([Child("w", [sys.executable, "-c", {child!r}])], stage="generate", timeout_s=120,
                     timeout_key="compute.generate_timeout_s", log=logging.getLogger("p"))
    """)
    p = subprocess.Popen([PY, "-c", parent], stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    line = ""
    deadline = time.monotonic() + 60
    while not line.startswith("[w] pids") and time.monotonic() < deadline:
        line = p.stdout.readline()
    pids = [int(x) for x in line.split("pids", 1)[1].split()]
    p.kill()
    p.wait()
    deadline = time.monotonic() + 5
    while any(_alive(x) for x in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(x) for x in pids), f"worker processes {pids} outlived the killed round process"


def test_result_file_protocol_of_the_progress_printer(capsys):
    from ratchet.flows.compute.worker import progress_printer

    report = progress_printer("train", every_s=3600)
    report(1, 5)
    report(2, 5)  # throttled
    report(5, 5)  # the last one always goes out
    lines = [json.loads(x[len(PROGRESS_PREFIX) :]) for x in capsys.readouterr().out.splitlines()]
    assert lines == [{"bar": "train", "done": 1, "total": 5}, {"bar": "train", "done": 5, "total": 5}]


def test_device_slots_are_held_per_device_while_a_stage_runs(prefect_harness):
    from prefect.client.orchestration import get_client

    from ratchet.flows.compute.slots import device_slots, reset_device_slots

    compute = load_config(None, **{"compute.devices": ["cpu", "cpu"]}).compute
    names = slot_names(compute.devices)

    def active():
        with get_client(sync_client=True) as client:
            return [client.read_global_concurrency_limit_by_name(n).active_slots for n in names]

    with device_slots(compute.devices, compute, logging.getLogger("test-slots")):
        assert active() == [1, 1]
        with pytest.raises(TimeoutError):  # a second stage on the same devices waits (here: gives up)
            with device_slots(compute.devices, compute.model_copy(update={"slot_wait_timeout_s": 1.0}), logging.getLogger("t")):
                pass
    assert active() == [0, 0]
    with device_slots(compute.devices, compute, logging.getLogger("test-slots")):
        assert reset_device_slots(compute.devices) == names and active() == [0, 0]
