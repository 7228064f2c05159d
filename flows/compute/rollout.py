"""Persistent rollout workers: generation engines (and co-located learners) loaded once for a round's on-policy steps.

``RolloutWorker`` starts ``python -m ratchet.flows.compute.worker serve --dir D`` pinned to one device group (the
same environment as the pool's one-shot workers), waits for its engine to load, then sends it requests over
files in ``D`` (``ratchet.flows.compute.protocol.request_file``): generate a shard into a Parquet file,
update the engine's weights in place from a checkpoint directory, stop; and, co-located with the engine, a
``GRPOLearner`` (``init_learner``, ``train_pass`` whose weights go straight into the engine, ``save``), so a
round's S on-policy steps load the model once and write one checkpoint. Guarantees as in the pool: the worker
leads its own process group and kills it when the round's process dies; every request (and the load) has the
wall-clock limit ``compute.generate_timeout_s``, past which the worker's whole group is killed and
``StageTimeout`` raised; a dead worker raises ``WorkerFailed`` quoting its last output lines. The device's
slots (``device_slots``) are held while the worker lives. No Prefect in the worker.

``RolloutGroup`` is what a round uses: one worker per device group of the pool, the workers ranks of one
``torch.distributed`` process group whose learners are DDP replicas (see its docstring).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from ratchet.common.files import atomic_write_text
from ratchet.common.procs import kill_tree
from ratchet.flows.compute.pool import TAIL_LINES, ProgressCb, StageTimeout, WorkerFailed, device_env, route_line
from ratchet.flows.compute.protocol import backend_spec, request_file, response_file, write_samples
from ratchet.flows.compute.slots import device_slots
from ratchet.loop.config import ComputeConfig, GenerationConfig, GRPOConfig
from ratchet.loop.generation.base import Completion, SamplingParams, job_alignment, shard_jobs
from ratchet.loop.train.data_parallel import fsdp_env
from ratchet.loop.train.grpo import GRPORun, GRPOSample


class RolloutWorker:
    """A generation engine in a child process for the length of a ``with`` block (one round)."""

    def __init__(
        self,
        model_path: str | Path,
        directory: Path,
        *,
        gen: GenerationConfig,
        compute: ComputeConfig,
        dtype: str,
        log: logging.Logger | logging.LoggerAdapter,
        group: tuple[str, ...] = ("cpu",),
        index: int = 0,
        n_workers: int = 1,
        progress: ProgressCb | None = None,
        dist: dict[str, str] | None = None,
        learner_bytes: int | None = None,
        slots: bool = True,
    ) -> None:
        self.dir, self.compute, self.log, self.progress = Path(directory), compute, log, progress
        self.slots = slots  # False: the caller holds the device slots (``RolloutGroup`` holds all its ranks' at once)
        self.group, self.name = group, f"rollout worker {index} [{','.join(group)}]"
        # dist: a rank's torch.distributed environment (RANK, WORLD_SIZE, MASTER_ADDR, ...; ``RolloutGroup``)
        self.env = {**device_env(group, index, n_workers, compute.cpu_threads_per_worker), **(dist or {})}
        # learner_bytes: a learner will share the device (vLLM on a GPU then gets what it leaves, and sleep mode)
        self.spec = {**backend_spec(model_path, gen, dtype), **({"learner_bytes": learner_bytes} if learner_bytes else {})}
        self.proc: subprocess.Popen | None = None
        self.tail: list[str] = []
        self.seq = 0
        self._stack = contextlib.ExitStack()

    # --- lifecycle --------------------------------------------------------------------------------

    def __enter__(self) -> RolloutWorker:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self._stack.close()
            raise
        return self

    def start(self) -> None:
        """Start the worker process (its engine loads in the background; ``wait_ready`` waits for it)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        for stale in [*self.dir.glob("req-*.json"), *self.dir.glob("resp-*.json"), self.dir / "ready.json"]:
            stale.unlink(missing_ok=True)
        atomic_write_text(self.dir / "engine.json", json.dumps(self.spec, sort_keys=True))
        if self.slots:
            self._stack.enter_context(device_slots(self.group, self.compute, self.log))
        env = {**os.environ, "RATCHET_POOL_PARENT": str(os.getpid()), "PYTHONUNBUFFERED": "1", **self.env}
        argv = [sys.executable, "-m", "ratchet.flows.compute.worker", "serve", "--dir", str(self.dir)]
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", process_group=0
        )
        self._stack.callback(kill_tree, self.proc)
        threading.Thread(target=self._pump, daemon=True).start()
        self.log.info("[%s] started (pid %d)", self.name, self.proc.pid)

    def wait_ready(self) -> None:
        """Wait until the engine has loaded. Raises ``StageTimeout``/``WorkerFailed`` as a request does."""
        self._wait_for(self.dir / "ready.json", "loading the model")

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Ask the worker to stop (its engine shuts down cleanly), then kill whatever is left of its group."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                self._send({"op": "stop"}, timeout_s=min(60.0, self.compute.generate_timeout_s))
        except (StageTimeout, WorkerFailed) as e:
            self.log.warning("[%s] did not stop cleanly: %s", self.name, e)
        finally:
            self._stack.close()
            self.proc = None

    # --- requests ---------------------------------------------------------------------------------

    def generate(
        self, messages: list[list[dict[str, str]]], params: SamplingParams, name: str = "rollouts", jobs: range | None = None
    ) -> list[Completion]:
        """``params.n`` completions per chat (or the ``jobs`` shard of them) from the loaded engine, in job order.

        Raises:
            StageTimeout: the request ran past ``compute.generate_timeout_s`` (the worker is killed).
            WorkerFailed: the worker died, or the request failed (its error is in the message).
        """
        req = self.generate_request(messages, params, name, jobs)
        self._send(req)
        return read_completions([Path(req["out"])])

    def generate_request(
        self, messages: list[list[dict[str, str]]], params: SamplingParams, name: str, jobs: range | None
    ) -> dict:
        """The request ``generate`` sends (its completions go to the request's ``out`` Parquet file)."""
        out = self.dir / f"{name}-{self.seq:06d}.parquet"
        req = {"op": "generate", "name": name, "messages": messages, "params": asdict(params), "out": str(out)}
        if jobs is not None:
            req["jobs"] = [jobs.start, jobs.stop]
        return req

    def update_weights(self, checkpoint_dir: str | Path) -> float:
        """Load a checkpoint's weights into the running engine in place; returns the worker's seconds for it.

        Raises:
            StageTimeout, WorkerFailed: as ``generate``.
        """
        return float(self._send({"op": "update_weights", "path": str(checkpoint_dir)}).get("seconds", 0.0))

    # --- a co-located learner (engine and trainer share the worker's device) ------------------------

    def init_learner(self, init_dir: str | Path, grpo: GRPOConfig, dtype: str, ref_dir: str | Path | None = None) -> bool:
        """Load a ``GRPOLearner`` beside the engine (the policy, AdamW and the reference stay loaded for the round).

        Returns:
            True when the engine now generates from the learner's own module (transformers backend, full weights,
            same dtype): each pass's update reaches it with no copy. False: each pass copies its weights in.
        """
        resp = self._send(learner_init_request(init_dir, grpo, dtype, ref_dir), timeout_s=self.compute.train_timeout_s)
        return bool(resp.get("shared"))

    def train_pass(self, samples: list[GRPOSample], run: GRPORun) -> dict:
        """One learner pass over ``samples``; its weights then go into the engine in place (nothing is written).

        Returns:
            ``{"metrics": {...}, "kept": [sample indices], "steps": optimizer steps, "seconds": ...}``.
        Raises:
            StageTimeout: past ``compute.train_timeout_s``. WorkerFailed: the pass failed or the worker died.
        """
        path = self.dir / f"samples-{self.seq:06d}.parquet"
        write_samples(path, samples)
        return self._send({"op": "train_pass", "samples": str(path), "run": asdict(run)}, timeout_s=self.compute.train_timeout_s)

    def save(self, out_dir: str | Path, optimizer_state: str | Path | None = None) -> None:
        """Write the learner's policy (the round's candidate) to ``out_dir`` (and AdamW's moments, if given)."""
        self._send(save_request(out_dir, optimizer_state), timeout_s=self.compute.train_timeout_s)

    def _send(self, req: dict, timeout_s: float | None = None) -> dict:
        return self.answer(self.post(req), req["op"], timeout_s)

    def post(self, req: dict) -> int:
        """Write request ``req`` for the worker; returns its sequence number (``answer`` waits for the response)."""
        if self.proc is None:
            raise WorkerFailed(f"{self.name} is not running; use it inside `with RolloutWorker(...)`")
        seq, self.seq = self.seq, self.seq + 1
        atomic_write_text(request_file(self.dir, seq), json.dumps(req))
        return seq

    def answer(self, seq: int, op: str, timeout_s: float | None = None, others: tuple[RolloutWorker, ...] = ()) -> dict:
        """The response to request ``seq`` (``op`` names it in errors). ``others``: workers whose death also ends the
        wait (the ranks of one collective: a rank that died leaves the others blocked in it).

        Raises:
            StageTimeout: past ``timeout_s`` (default ``compute.generate_timeout_s``); the worker is killed.
            WorkerFailed: this worker (or one of ``others``) died, or the request failed.
        """
        resp = json.loads(self._wait_for(response_file(self.dir, seq), op, timeout_s, others).read_text())
        if not resp.get("ok"):
            raise WorkerFailed(f"{self.name}: {op} failed: {resp.get('error')}")
        return resp

    def _wait_for(self, path: Path, what: str, timeout_s: float | None = None, others: tuple[RolloutWorker, ...] = ()) -> Path:
        limit = self.compute.generate_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        while not path.exists():
            for w in (self, *others):
                if w.proc is not None and w.proc.poll() is not None:
                    raise WorkerFailed(
                        f"{w.name} exited with status {w.proc.returncode} while {what}; its last output:\n"
                        + "\n".join(w.tail[-TAIL_LINES:])
                    )
            if time.monotonic() > deadline:
                kill_tree(self.proc)
                raise StageTimeout(
                    f"{self.name}: {what} ran past compute.generate_timeout_s = {limit:g} s and the worker was killed; "
                    "raise compute.generate_timeout_s in the config (or give it less work)"
                )
            time.sleep(0.02)
        return path

    def _pump(self) -> None:
        done: dict = {}
        for line in iter(self.proc.stdout.readline, ""):
            route_line(self.name, line.rstrip("\n"), self.log, self.tail, done, 0, self.progress)


def learner_init_request(init_dir: str | Path, grpo: GRPOConfig, dtype: str, ref_dir: str | Path | None) -> dict:
    """The "learner_init" request (``RolloutWorker.init_learner``)."""
    grpo_json = grpo.model_dump(mode="json")
    return {
        "op": "learner_init",
        "init_dir": str(init_dir),
        "grpo": grpo_json,
        "dtype": dtype,
        "ref_dir": str(ref_dir) if ref_dir else None,
    }


def save_request(out_dir: str | Path, optimizer_state: str | Path | None) -> dict:
    """The "save" request (``RolloutWorker.save``)."""
    return {"op": "save", "out": str(out_dir), "optimizer_state": str(optimizer_state) if optimizer_state else None}


def read_completions(paths: list[Path]) -> list[Completion]:
    """The completions of one or more shard files (``generate`` responses), in (prompt_index, sample_index) order."""
    import pyarrow.parquet as pq

    rows = [r for p in paths for r in pq.read_table(p).to_pylist()]
    return [Completion.from_record(r) for r in sorted(rows, key=lambda r: (r["prompt_index"], r["sample_index"]))]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a process group's rendezvous, ``MASTER_PORT``)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rank_env(rank: int, world: int, port: int, on_gpu: bool, fsdp: bool = False) -> dict[str, str]:
    """The ``torch.distributed`` environment of rank ``rank`` of ``world`` on this machine (env:// rendezvous at
    127.0.0.1:``port``; what ``accelerate launch``/torchrun set). A GPU rank sees only its own GPUs
    (``CUDA_VISIBLE_DEVICES``), so its local device is index 0. ``fsdp``: accelerate's FSDP settings too
    (``ratchet.loop.train.data_parallel.fsdp_env``, the ones ``accelerate launch --use_fsdp`` gives the per-step path)."""
    local = "0" if on_gpu else str(rank)
    return {
        **(fsdp_env() if fsdp else {}),
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": local,
        "LOCAL_WORLD_SIZE": "1" if on_gpu else str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


class RolloutGroup:
    """A round's rollout workers, one per device group of the pool, used as one engine and one learner.

    One device group: one ``RolloutWorker``, as before. N groups (``compute.devices = ["cpu", "cpu"]``, or
    ``["cuda:0", "cuda:1"]``): N workers started together, each a rank of one ``torch.distributed`` process group
    (gloo on CPU, NCCL on GPU; ``rank_env``), so the N co-located ``GRPOLearner`` s are DDP replicas.
    ``generate`` splits the jobs into N shards on batch boundaries (``shard_jobs``; the transformers backend
    seeds each batch by its index, so the rollouts are those one worker would sample) and each rank's engine
    samples its shard from its own replica: after every optimizer step all replicas hold the same weights (DDP
    all-reduces the gradients), so no weights move between ranks. ``init_learner``, ``train_pass`` and ``save``
    go to every rank at once (they are collectives; each rank trains on its slice of every mini-batch, rank 0
    writes the checkpoint) and return rank 0's answer. A rank that dies ends every rank's wait with
    ``WorkerFailed``; leaving the block kills every worker.
    """

    def __init__(
        self,
        model_path: str | Path,
        directory: Path,
        *,
        gen: GenerationConfig,
        compute: ComputeConfig,
        dtype: str,
        log: logging.Logger | logging.LoggerAdapter,
        groups: list[tuple[str, ...]],
        learner_bytes: int | None = None,
    ) -> None:
        self.gen, self.compute, self.dir = gen, compute, Path(directory)
        n, port = len(groups), free_port()
        self.workers = [
            RolloutWorker(
                model_path,
                self.dir if n == 1 else self.dir / f"rank-{k}",
                gen=gen,
                compute=compute,
                dtype=dtype,
                log=log,
                group=g,
                index=k,
                n_workers=n,
                dist=rank_env(k, n, port, g[0] != "cpu", fsdp=compute.fsdp) if n > 1 else None,
                learner_bytes=learner_bytes,
                slots=False,
            )
            for k, g in enumerate(groups)
        ]
        self.devices, self.log = tuple(d for g in groups for d in g), log
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> RolloutGroup:
        try:
            self._stack.enter_context(device_slots(self.devices, self.compute, self.log))  # every rank's, at once
            for w in self.workers:  # every engine loads at once
                self._stack.callback(w.close)
                w.start()
            for w in self.workers:
                w.wait_ready()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    @property
    def progress(self) -> ProgressCb | None:
        return self.workers[0].progress

    @progress.setter
    def progress(self, cb: ProgressCb | None) -> None:
        """One progress callback for the group: each worker's (done, total) of a bar, summed over the workers."""
        if cb is None or len(self.workers) == 1:
            self.workers[0].progress = cb
            return
        seen: dict[tuple[int, str], tuple[float, float]] = {}

        def rank_cb(k: int):
            def report(name: str, done: float, total: float) -> None:
                seen[(k, name)] = (done, total)
                mine = [v for (_, bar), v in seen.items() if bar == name]
                cb(name, sum(d for d, _ in mine), sum(t for _, t in mine))

            return report

        for k, w in enumerate(self.workers):
            w.progress = rank_cb(k)

    def generate(self, messages: list[list[dict[str, str]]], params: SamplingParams, name: str = "rollouts") -> list[Completion]:
        """``params.n`` completions per chat, sharded over the ranks; in (prompt_index, sample_index) order.

        Raises:
            StageTimeout, WorkerFailed: as ``RolloutWorker.generate``.
        """
        if len(self.workers) == 1:
            return self.workers[0].generate(messages, params, name)
        align = job_alignment(self.gen.backend, params, self.gen.batch_size)
        shards = shard_jobs(len(messages), params.n, len(self.workers), align)
        reqs = [w.generate_request(messages, params, name, jobs) for w, jobs in zip(self.workers, shards)]
        self._all(reqs, None)
        return read_completions([Path(r["out"]) for r in reqs])

    def update_weights(self, checkpoint_dir: str | Path) -> float:
        """Load a checkpoint into every rank's engine in place; returns the slowest rank's seconds."""
        resps = self._all([{"op": "update_weights", "path": str(checkpoint_dir)}] * len(self.workers), None, every=True)
        return max(float(r.get("seconds", 0.0)) for r in resps)

    def init_learner(self, init_dir: str | Path, grpo: GRPOConfig, dtype: str, ref_dir: str | Path | None = None) -> bool:
        """Each rank's ``GRPOLearner`` (a DDP replica with N ranks); True when every engine generates from its own
        rank's module (see ``RolloutWorker.init_learner``)."""
        req = learner_init_request(init_dir, grpo, dtype, ref_dir)
        resps = self._all([req] * len(self.workers), self.compute.train_timeout_s, every=True)
        return all(bool(r.get("shared")) for r in resps)

    def train_pass(self, samples: list[GRPOSample], run: GRPORun) -> dict:
        """One data-parallel learner pass over ``samples`` on every rank (see ``RolloutWorker.train_pass``); rank 0's
        answer (its metrics are reduced over the ranks)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"samples-{self.workers[0].seq:06d}.parquet"  # one file every rank reads
        write_samples(path, samples)
        req = {"op": "train_pass", "samples": str(path), "run": asdict(run)}
        return self._all([req] * len(self.workers), self.compute.train_timeout_s)

    def save(self, out_dir: str | Path, optimizer_state: str | Path | None = None) -> None:
        """Write the policy to ``out_dir`` (rank 0 writes; every rank takes part)."""
        self._all([save_request(out_dir, optimizer_state)] * len(self.workers), self.compute.train_timeout_s)

    def _all(self, reqs: list[dict], timeout_s: float | None, every: bool = False):
        """Post ``reqs[k]`` to rank k, then wait for every answer; rank 0's (``every``: the list of all)."""
        seqs = [w.post(r) for w, r in zip(self.workers, reqs)]
        resps = [
            w.answer(seq, r["op"], timeout_s, others=tuple(x for x in self.workers if x is not w))
            for w, seq, r in zip(self.workers, seqs, reqs)
        ]
        return resps if every else resps[0]


# Rollout workers serving a round in this process, by round id: a round's generate stage (a Prefect task, which
# takes only ids) samples from its round's live engine instead of starting pool workers.
_LIVE: dict[str, RolloutWorker | RolloutGroup] = {}


@contextlib.contextmanager
def serving(key: str, worker: RolloutWorker | RolloutGroup) -> Iterator[RolloutWorker | RolloutGroup]:
    """Make ``worker`` the live engine of ``key`` (a round id) in this process for the block.

    Raises:
        RuntimeError: another worker already serves ``key`` (two flows of one round in one process).
    """
    if key in _LIVE:
        raise RuntimeError(f"a rollout worker already serves {key} in this process; run one attempt of a round at a time")
    _LIVE[key] = worker
    try:
        yield worker
    finally:
        _LIVE.pop(key, None)


def live_worker(key: str) -> RolloutWorker | RolloutGroup | None:
    """The rollout worker serving ``key`` (a round id) in this process, or None (stages then use the device pool)."""
    return _LIVE.get(key)
