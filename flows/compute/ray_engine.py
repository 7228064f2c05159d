"""``compute.engine = "ray"``: the pool's generation shards as Ray tasks on an existing Ray cluster.

Each device group's shard runs ``ratchet.flows.compute.worker.ray_generate_shard`` as one Ray task that asks
for the group's resources (``num_gpus`` = GPUs in the group; on CPU ``num_cpus`` = the thread count the local
pool would give it), reads the same request file and writes the same shard file as the local worker, with the
same seeds and thread count, so the merged completions equal the local pool's. Ratchet (same version) must be
installed on every node, and the request and shard files must be on storage every node sees (the campaign's
run directory on a shared filesystem); see docs/devices.md. Ray is imported only
here, and only when asked for (``pip install 'ratchet[ray]'``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from ratchet.flows.compute.protocol import StageTimeout, WorkerFailed
from ratchet.loop.config import ComputeConfig


def connect(compute: ComputeConfig):
    """The ``ray`` module, connected to ``compute.ray_address`` (None: ``RAY_ADDRESS``, else a local instance).

    Raises:
        ImportError: Ray is not installed (names the extra).
    """
    try:
        import ray
    except ImportError as e:
        raise ImportError(
            f"compute.engine = 'ray' needs Ray ({e}); pip install 'ratchet[ray]' or set compute.engine = 'local'"
        ) from e
    if not ray.is_initialized():
        ray.init(address=compute.ray_address, ignore_reinit_error=True, log_to_driver=True, logging_level=logging.WARNING)
    return ray


def run_shards(
    req_path: Path,
    shards: list[int],
    groups: list[tuple[str, ...]],
    envs: list[dict[str, str]],
    *,
    compute: ComputeConfig,
    stage: str,
    log: logging.Logger | logging.LoggerAdapter,
) -> None:
    """Run ``worker.ray_generate_shard`` for each shard index in ``shards`` (shard k on device group k) as Ray tasks.

    Raises:
        StageTimeout: a task was still running ``compute.generate_timeout_s`` after the start (all are cancelled).
        WorkerFailed: a task raised (the message carries Ray's error with the worker's traceback).
    """
    ray = connect(compute)
    from ratchet.flows.compute.worker import ray_generate_shard

    refs = []
    for k in shards:
        gpus = len([d for d in groups[k] if d != "cpu"])
        env = {key: v for key, v in envs[k].items() if key in ("OMP_NUM_THREADS", "RATCHET_DEVICE")}
        opts = {"num_gpus": gpus, "num_cpus": 1 if gpus else int(env.get("OMP_NUM_THREADS", "1")), "max_retries": 0}
        refs.append(ray.remote(ray_generate_shard).options(**opts).remote(str(req_path), k, env))
        log.info("[ray] shard %d on %s submitted (%s)", k, ",".join(groups[k]), opts)
    t0 = time.monotonic()
    done, pending = ray.wait(refs, num_returns=len(refs), timeout=compute.generate_timeout_s)
    if pending:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise StageTimeout(
            f"stage {stage!r}: {len(pending)} Ray generation task(s) ran past compute.generate_timeout_s = "
            f"{compute.generate_timeout_s:g} s and were cancelled; raise compute.generate_timeout_s (or give the stage less work)"
        )
    try:
        nodes = ray.get(done)
    except ray.exceptions.RayError as e:
        raise WorkerFailed(f"stage {stage!r}: a Ray generation task failed: {e}") from e
    log.info("[ray] %d shard(s) done in %.1f s on %s", len(done), time.monotonic() - t0, sorted(set(nodes)))
