"""A persistent rollout worker: one generation engine that stays loaded for a whole round's on-policy steps.

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
from ratchet.loop.generation.base import Completion, SamplingParams
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
    ) -> None:
        self.dir, self.compute, self.log, self.progress = Path(directory), compute, log, progress
        self.group, self.name = group, f"rollout worker {index} [{','.join(group)}]"
        self.env = device_env(group, index, n_workers, compute.cpu_threads_per_worker)
        self.spec = backend_spec(model_path, gen, dtype)
        self.proc: subprocess.Popen | None = None
        self.tail: list[str] = []
        self.seq = 0
        self._stack = contextlib.ExitStack()

    # --- lifecycle --------------------------------------------------------------------------------

    def __enter__(self) -> RolloutWorker:
        self.dir.mkdir(parents=True, exist_ok=True)
        for stale in [*self.dir.glob("req-*.json"), *self.dir.glob("resp-*.json"), self.dir / "ready.json"]:
            stale.unlink(missing_ok=True)
        atomic_write_text(self.dir / "engine.json", json.dumps(self.spec, sort_keys=True))
        self._stack.enter_context(device_slots(self.group, self.compute, self.log))
        env = {**os.environ, "RATCHET_POOL_PARENT": str(os.getpid()), "PYTHONUNBUFFERED": "1", **self.env}
        argv = [sys.executable, "-m", "ratchet.flows.compute.worker", "serve", "--dir", str(self.dir)]
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", process_group=0
        )
        self._stack.callback(kill_tree, self.proc)
        threading.Thread(target=self._pump, daemon=True).start()
        self.log.info("[%s] started (pid %d)", self.name, self.proc.pid)
        try:
            self._wait_for(self.dir / "ready.json", "loading the model")
        except BaseException:
            self._stack.close()
            raise
        return self

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
        import pyarrow.parquet as pq

        out = self.dir / f"{name}-{self.seq:06d}.parquet"
        req = {"op": "generate", "name": name, "messages": messages, "params": asdict(params), "out": str(out)}
        if jobs is not None:
            req["jobs"] = [jobs.start, jobs.stop]
        self._send(req)
        rows = sorted(pq.read_table(out).to_pylist(), key=lambda r: (r["prompt_index"], r["sample_index"]))
        return [Completion.from_record(r) for r in rows]

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
        req = {"op": "learner_init", "init_dir": str(init_dir), "grpo": grpo.model_dump(mode="json"), "dtype": dtype}
        resp = self._send({**req, "ref_dir": str(ref_dir) if ref_dir else None}, timeout_s=self.compute.train_timeout_s)
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
        req = {"op": "save", "out": str(out_dir), "optimizer_state": str(optimizer_state) if optimizer_state else None}
        self._send(req, timeout_s=self.compute.train_timeout_s)

    def _send(self, req: dict, timeout_s: float | None = None) -> dict:
        if self.proc is None:
            raise WorkerFailed(f"{self.name} is not running; use it inside `with RolloutWorker(...)`")
        seq, self.seq = self.seq, self.seq + 1
        atomic_write_text(request_file(self.dir, seq), json.dumps(req))
        resp = json.loads(self._wait_for(response_file(self.dir, seq), req["op"], timeout_s).read_text())
        if not resp.get("ok"):
            raise WorkerFailed(f"{self.name}: {req['op']} failed: {resp.get('error')}")
        return resp

    def _wait_for(self, path: Path, what: str, timeout_s: float | None = None) -> Path:
        limit = self.compute.generate_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        while not path.exists():
            if self.proc.poll() is not None:
                raise WorkerFailed(
                    f"{self.name} exited with status {self.proc.returncode} while {what}; its last output:\n"
                    + "\n".join(self.tail[-TAIL_LINES:])
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


# Rollout workers serving a round in this process, by round id: a round's generate stage (a Prefect task, which
# takes only ids) samples from its round's live engine instead of starting pool workers.
_LIVE: dict[str, RolloutWorker] = {}


@contextlib.contextmanager
def serving(key: str, worker: RolloutWorker) -> Iterator[RolloutWorker]:
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


def live_worker(key: str) -> RolloutWorker | None:
    """The rollout worker serving ``key`` (a round id) in this process, or None (stages then use the device pool)."""
    return _LIVE.get(key)
