"""compute.engine = "ray": the round engine's ranks as Ray actors on a (local, CPU) Ray cluster equal the local ranks."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ratchet.common.procs import kill_tree
from ratchet.flows.compute.engine import Placement, open_engine
from ratchet.flows.compute.messages import engine_spec
from ratchet.loop.config import ComputeConfig, GenerationConfig
from ratchet.loop.generation.sampling import SamplingParams
from ratchet.loop.tasks.sources import chat_messages

LOG = logging.getLogger("test-ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head():
    """A Ray head with 2 CPUs in this test's own process group (stopped by killing that group, nothing else)."""
    ray = pytest.importorskip("ray")
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    ray_bin = Path(sys.executable).with_name("ray")
    argv = [str(ray_bin), "start", "--head", "--block", "--num-cpus", "2", "--disable-usage-stats", "--include-dashboard=false"]
    argv += ["--port", str(port), "--temp-dir", temp]
    head = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, process_group=0)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        assert head.poll() is None, "ray start --head exited"
        time.sleep(0.5)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        ray.shutdown()
        kill_tree(head)


@pytest.mark.slow
def test_ray_actor_ranks_generate_and_sync_what_the_local_engine_does(tiny_model_dir, tmp_path, ray_head):
    """The Ray placement of the round engine: one actor per device group, kept for the block, the same typed
    requests as local rank processes, the same sharded rollouts; a weight sync reaches every actor."""
    msgs = [chat_messages("sys", [], f"What is {i} + {i + 1}?") for i in range(6)]
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=5)
    gen = GenerationConfig(batch_size=4)
    local = ComputeConfig(devices=("cpu", "cpu"), device_slots=False, cpu_threads_per_worker=1)
    remote = local.model_copy(update={"engine": "ray", "ray_address": ray_head})
    placement, spec = Placement((("cpu",), ("cpu",))), engine_spec(tiny_model_dir, gen, "float32")
    with open_engine(spec, placement, gen=gen, compute=local, log=LOG) as e:
        want = e.generate(msgs, params)
    os.environ.pop("RAY_ADDRESS", None)
    with open_engine(spec, placement, gen=gen, compute=remote, log=LOG) as e:
        assert type(e).__name__ == "RayEngine" and e.ranks == 2
        got = e.generate(msgs, params)
        assert len(got) == 12 and got == want
        e.sync(tiny_model_dir, "same")  # every actor loads the weights in place
        assert e.holds == "same" and e.generate(msgs, params) == want
    assert not list(tmp_path.iterdir())  # nothing on shared storage
