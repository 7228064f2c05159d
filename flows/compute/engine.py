"""The round engine: the generation engines and learners a round loads once and keeps to its end.

Who owns what. The round's flow process (the **parent**) owns one ``RoundEngine`` for the whole round (``open_engine``;
``ratchet.flows.rounds.stages.steps`` opens it at the round's start and closes it at its end) and is the only store
writer. The engine's **ranks** are child processes (``LocalEngine``: ``python -m ratchet.flows.compute.worker
serve``, one per device group of ``compute.devices``, each pinned to its devices) or Ray actors
(``ratchet.flows.compute.ray_engine.RayEngine``, ``compute.engine = "ray"``). Each rank holds a generation backend
(transformers or vLLM) on its device group and, for a GRPO round, a co-located ``GRPOLearner``; an RFT pass runs in
rank processes too. With N ranks the learners are the ranks of one ``torch.distributed`` group (gloo on CPU, NCCL on
GPU; a ``file://`` rendezvous in a 0700 folder, so no port is open to other users) and so DDP (or FSDP) replicas.

How they talk. The parent sends typed requests (``ratchet.flows.compute.messages``) over a private socket pair per
rank (``multiprocessing.connection``) and waits for each ``Reply`` with the request's wall-clock limit
(``compute.generate_timeout_s`` for loading and generating, ``compute.train_timeout_s`` for learner work); past it the
rank's whole process group is killed and ``StageTimeout`` raised. A rank that dies ends every wait within
``POLL_S`` with ``WorkerFailed`` quoting its last output lines. Ranks stream log and progress lines on stdout into
the run logger. The device slots (``device_slots``) of every rank are held while the engine lives.

Every algorithm goes through the same six verbs: ``start`` (engines load, and a GRPO learner), ``generate`` (jobs
sharded over the ranks on batch boundaries: the rollouts are those one rank would sample), ``train_step`` (one GRPO
pass, whose weights reach the engines in place, or one RFT pass, saved), ``save``, ``sync`` (load a checkpoint's
weights into every engine: an RFT candidate before its evaluation) and ``close``.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

from ratchet.common.procs import kill_tree
from ratchet.flows.compute.messages import (
    EngineSpec,
    Generate,
    GRPOStep,
    Reply,
    Save,
    SFTStep,
    Start,
    StartLearner,
    Stop,
    Sync,
)
from ratchet.flows.compute.pool import TAIL_LINES, ProgressCb, device_env, route_line
from ratchet.flows.compute.protocol import StageTimeout, WorkerFailed
from ratchet.flows.compute.slots import device_slots
from ratchet.loop.config import ComputeConfig, GenerationConfig
from ratchet.loop.generation.sampling import Completion, PromptInput, SamplingParams, job_alignment, shard_jobs
from ratchet.loop.train.data_parallel import fsdp_env

POLL_S = 0.1  # how often a wait checks that every rank is alive: a dead rank is reported within this


class RoundEngine(Protocol):
    """One round's engines and learners (see the module docstring); every stage of every algorithm goes through it.

    ``holds``: the checkpoint id whose weights the engines hold now (None: an unsaved policy of the round's learner,
    or unknown), so a stage that needs another checkpoint's outputs knows to ``sync`` first.
    """

    ranks: int
    holds: str | None
    shared: bool  # every engine generates from its rank's learner module (set by ``start``)
    progress: ProgressCb | None

    def start(self, learner: StartLearner | None = None) -> bool: ...

    def generate(
        self, messages: list[PromptInput], params: SamplingParams, name: str = "rollouts", jobs: range | None = None
    ) -> list[Completion]: ...

    def train_step(self, step: GRPOStep | SFTStep) -> dict: ...

    def save(self, out_dir: str | Path) -> None: ...

    def sync(self, checkpoint_dir: str | Path, checkpoint_id: str | None = None) -> float: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Placement:
    """Where a round's ranks run: one per device group; ``fsdp``: the learners shard rather than replicate."""

    groups: tuple[tuple[str, ...], ...]
    fsdp: bool = False

    def describe(self) -> str:
        n = len(self.groups)
        return "1 process" if n == 1 else f"{n} ranks" + (" (FSDP)" if self.fsdp else " (DDP)")


class RankProcess:
    """One rank as a child process, spoken to over its own socket pair."""

    def __init__(self, name: str, env: dict[str, str], log: logging.Logger | logging.LoggerAdapter) -> None:
        self.name, self.env, self.log = name, env, log
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.tail: list[str] = []
        self.progress: ProgressCb | None = None

    def start(self) -> None:
        """Start the process (its ``Start`` request is sent by the engine)."""
        mine, theirs = socket.socketpair()
        env = {**os.environ, "RATCHET_POOL_PARENT": str(os.getpid()), "PYTHONUNBUFFERED": "1", **self.env}
        argv = [sys.executable, "-m", "ratchet.flows.compute.worker", "serve", "--fd", str(theirs.fileno())]
        try:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                process_group=0,
                pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
        self.conn = Connection(mine.detach())
        # The reader runs in a copy of this context: Prefect's settings (a run's own server is a context setting) and
        # run context, so the rank's lines reach the run's logs and progress artifacts (a bare thread has neither).
        reader = contextvars.copy_context()
        threading.Thread(target=reader.run, args=(self._pump,), name=f"{self.name} output", daemon=True).start()
        self.log.info("[%s] started (pid %d)", self.name, self.proc.pid)

    def send(self, msg: Any) -> None:
        if self.proc is None or self.conn is None:
            raise WorkerFailed(f"{self.name} is not running; use the engine inside its `with` block")
        try:
            self.conn.send(msg)
        except OSError as e:  # its end closed: it died
            raise self._died(type(msg).__name__) from e

    def receive(self, what: str, timeout_s: float, timeout_key: str, others: tuple[RankProcess, ...] = ()) -> Any:
        """The reply to the request in flight (``what`` names it in errors); ``others``: ranks of the same collective,
        whose death also ends the wait (a rank that died leaves the others blocked in it).

        Raises:
            StageTimeout: no reply within ``timeout_s`` (this rank's process group is killed).
            WorkerFailed: this rank or one of ``others`` died, or the request failed (its error is in the message).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self.conn.poll(POLL_S):
                    reply: Reply = self.conn.recv()
                    break
            except (EOFError, OSError) as e:
                raise self._died(what) from e
            for r in (self, *others):
                if r.proc is not None and r.proc.poll() is not None:
                    raise r._died(what)
            if time.monotonic() > deadline:
                kill_tree(self.proc)
                raise StageTimeout(
                    f"{self.name}: {what} ran past {timeout_key} = {timeout_s:g} s and the rank was killed; "
                    f"raise {timeout_key} in the config (or give it less work)"
                )
        if not reply.ok:
            raise WorkerFailed(f"{self.name}: {what} failed: {reply.error}")
        return reply

    def _died(self, what: str) -> WorkerFailed:
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=1.0)  # its last lines reach the tail
        code = None if self.proc is None else self.proc.returncode
        return WorkerFailed(
            f"{self.name} exited with status {code} while {what}; its last output:\n" + "\n".join(self.tail[-TAIL_LINES:])
        )

    def stop(self, timeout_s: float) -> None:
        """Ask the rank to stop (its engine shuts down cleanly), then kill whatever is left of its group.

        Its last lines go to this module's logger, not the run's: a round that is stopping (Ctrl-C, an error) may already
        have shut the run logger's service down."""
        self.log, self.progress = logging.getLogger(__name__), None
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.send(Stop())
                self.receive("stopping", timeout_s, "compute.generate_timeout_s")
        except (StageTimeout, WorkerFailed) as e:
            self.log.warning("[%s] did not stop cleanly: %s", self.name, e)
        finally:
            if self.proc is not None:
                kill_tree(self.proc)
            if self.conn is not None:
                self.conn.close()
            self.proc = self.conn = None

    def _pump(self) -> None:
        done: dict = {}
        for line in iter(self.proc.stdout.readline, ""):
            route_line(self.name, line.rstrip("\n"), self.log, self.tail, done, 0, self.progress)


class EngineBase:
    """The verbs every placement shares, on top of its one primitive, ``_all`` (send ``reqs[k]`` to rank k and wait for
    every reply within the request's limit; rank 0's reply, or all of them with ``every``). ``LocalEngine`` and
    ``ratchet.flows.compute.ray_engine.RayEngine`` differ only in where the ranks run and how a request reaches them."""

    def __init__(
        self,
        spec: EngineSpec,
        placement: Placement,
        *,
        gen: GenerationConfig,
        compute: ComputeConfig,
        log: logging.Logger | logging.LoggerAdapter,
        holds: str | None = None,
    ) -> None:
        self.spec, self.placement, self.gen, self.compute, self.log = spec, placement, gen, compute, log
        self.holds, self.shared, self.ranks = holds, False, len(placement.groups)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError

    def _all(self, reqs: list, what: str, every: bool = False, generate: bool = False):
        raise NotImplementedError

    def _limit(self, generate: bool) -> tuple[float, str]:
        """A request's wall-clock limit and the config key that sets it."""
        if generate:
            return self.compute.generate_timeout_s, "compute.generate_timeout_s"
        return self.compute.train_timeout_s, "compute.train_timeout_s"

    def generate(
        self, messages: list[PromptInput], params: SamplingParams, name: str = "rollouts", jobs: range | None = None
    ) -> list[Completion]:
        """``params.n`` completions per chat (or only the ``jobs`` of the flattened (prompt_index, sample_index) job
        list, bounds on multiples of ``job_alignment``: a resumable stage's batch), sharded over the ranks on batch
        boundaries; in (prompt_index, sample_index) order, indices global.

        Raises:
            StageTimeout: past ``compute.generate_timeout_s`` (the rank is killed). WorkerFailed: a rank died or failed.
        """
        sel = range(len(messages) * params.n) if jobs is None else jobs
        if self.ranks == 1:
            reqs = [Generate(messages, params, name, None if jobs is None else (sel.start, sel.stop))]
        else:  # shards of the selection, in alignment units from its (aligned) start
            align = job_alignment(self.gen.backend, params, self.gen.batch_size)
            shards = [range(sel.start + j.start, sel.start + j.stop) for j in shard_jobs(len(sel), 1, self.ranks, align)]
            reqs = [Generate(messages, params, name, (j.start, j.stop)) for j in shards]
        replies = self._all(reqs, f"generating {name}", every=True, generate=True)
        return sorted((c for r in replies for c in r.value), key=lambda c: (c.prompt_index, c.sample_index))

    def train_step(self, step: GRPOStep | SFTStep) -> dict:
        """One learner pass on every rank (each on its slice of every mini-batch); rank 0's answer. A GRPO pass's
        weights reach the engines in place; an RFT pass writes its checkpoint (``{"saved", "metrics"}``).

        Raises:
            StageTimeout: past ``compute.train_timeout_s``. WorkerFailed: the pass failed or a rank died.
        """
        what = "a GRPO pass" if isinstance(step, GRPOStep) else "an RFT pass"
        if isinstance(step, GRPOStep):
            self.holds = None  # an unsaved policy of the round's learner
        return self._all([step] * self.ranks, what).value

    def save(self, out_dir: str | Path, optimizer_state: str | Path | None = None) -> None:
        """Write the learner's policy to ``out_dir`` (rank 0 writes; every rank takes part)."""
        msg = Save(str(out_dir), str(optimizer_state) if optimizer_state else None)
        self._all([msg] * self.ranks, "saving the policy")

    def sync(self, checkpoint_dir: str | Path, checkpoint_id: str | None = None) -> float:
        """Load a checkpoint's weights into every rank's engine in place; returns the slowest rank's seconds."""
        replies = self._all([Sync(str(checkpoint_dir), checkpoint_id)] * self.ranks, "loading weights", every=True, generate=True)
        self.holds = checkpoint_id
        return max(r.seconds for r in replies)


class LocalEngine(EngineBase):
    """A round engine whose ranks are child processes on this machine: one per device group of the placement.

    One group: one process holds the engine (and the learner). N groups: N processes started together, each a rank of
    one ``torch.distributed`` group, so their learners are DDP (FSDP with ``compute.fsdp``) replicas; ``generate``
    splits the jobs into N shards on batch boundaries (the transformers backend seeds each batch by its index, so the
    rollouts are those one rank would sample) and each rank samples its shard from its own replica. Learner work
    (``start``'s learner, ``train_step``, ``save``) goes to every rank at once (collectives; rank 0 writes) and returns
    rank 0's answer. Leaving the ``with`` block stops every rank.
    """

    def __init__(self, spec: EngineSpec, placement: Placement, **kw) -> None:
        super().__init__(spec, placement, **kw)
        self._rendezvous: str | None = None
        self._procs = [RankProcess(f"engine rank {k} [{','.join(g)}]", {}, self.log) for k, g in enumerate(placement.groups)]
        self._stack = contextlib.ExitStack()

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self, learner: StartLearner | None = None) -> bool:
        """Start every rank and load its engine (all at once), then the learner when given.

        Returns:
            True when every engine generates from its own rank's learner module (transformers, full weights, same
            dtype: each pass reaches the engine with no copy); False otherwise (each pass copies its weights in).

        Raises:
            StageTimeout: loading ran past ``compute.generate_timeout_s`` (learner: ``compute.train_timeout_s``).
            WorkerFailed: a rank died or failed to load (its last output lines are in the message).
        """
        devices = tuple(d for g in self.placement.groups for d in g)
        try:
            self._stack.enter_context(device_slots(devices, self.compute, self.log))  # every rank's, at once
            if self.ranks > 1:
                folder = tempfile.mkdtemp(prefix="ratchet-rendezvous-")  # 0700: only this user reaches the store
                self._stack.callback(shutil.rmtree, folder, True)
                self._rendezvous = str(Path(folder) / "store")
            for k, (proc, group) in enumerate(zip(self._procs, self.placement.groups)):
                proc.env = self._rank_env(k, group)
                self._stack.callback(proc.stop, min(60.0, self.compute.generate_timeout_s))
                proc.start()
            self._all([Start(self.spec)] * self.ranks, "loading the model", generate=True)
            if learner is None:
                return False
            replies = self._all([learner] * self.ranks, "loading the learner", every=True)
        except BaseException:
            self._stack.close()
            raise
        self.shared = all(bool(r.value) for r in replies)
        return self.shared

    def _rank_env(self, rank: int, group: tuple[str, ...]) -> dict[str, str]:
        env = device_env(group, rank, self.ranks, self.compute.cpu_threads_per_worker)
        if self.ranks == 1:
            return env
        on_gpu = group[0] != "cpu"
        return {
            **env,
            **(fsdp_env() if self.placement.fsdp else {}),
            "RANK": str(rank),
            "WORLD_SIZE": str(self.ranks),
            "LOCAL_RANK": "0" if on_gpu else str(rank),  # a GPU rank sees only its own GPUs
            "LOCAL_WORLD_SIZE": "1" if on_gpu else str(self.ranks),
            "RATCHET_RENDEZVOUS": self._rendezvous or "",
        }

    def close(self) -> None:
        """Stop every rank (their engines shut down cleanly) and free the device slots."""
        self._stack.close()

    # --- the verbs -------------------------------------------------------------------------------------

    @property
    def progress(self) -> ProgressCb | None:
        return self._procs[0].progress

    @progress.setter
    def progress(self, cb: ProgressCb | None) -> None:
        """One progress callback for the engine: each rank's (done, total) of a bar, summed over the ranks."""
        if cb is None or self.ranks == 1:
            for p in self._procs:
                p.progress = cb
            return
        seen: dict[tuple[int, str], tuple[float, float]] = {}

        def rank_cb(k: int):
            def report(name: str, done: float, total: float) -> None:
                seen[(k, name)] = (done, total)
                mine = [v for (_, bar), v in seen.items() if bar == name]
                cb(name, sum(d for d, _ in mine), sum(t for _, t in mine))

            return report

        for k, p in enumerate(self._procs):
            p.progress = rank_cb(k)

    def _all(self, reqs: list, what: str, every: bool = False, generate: bool = False):
        """Send ``reqs[k]`` to rank k, then wait for every reply; rank 0's (``every``: the list of all)."""
        limit, key = self._limit(generate)
        for p, r in zip(self._procs, reqs):
            p.send(r)
        replies = [p.receive(what, limit, key, others=tuple(x for x in self._procs if x is not p)) for p in self._procs]
        return replies if every else replies[0]


@contextlib.contextmanager
def open_engine(
    spec: EngineSpec,
    placement: Placement,
    *,
    gen: GenerationConfig,
    compute: ComputeConfig,
    log: logging.Logger | logging.LoggerAdapter,
    holds: str | None = None,
    learner: StartLearner | None = None,
) -> Iterator[RoundEngine]:
    """The round's engine for the block, started (and its learner, when given), on the placement ``compute.engine``
    names: child processes on this machine ("local") or Ray actors ("ray"). Closed at the block's end."""
    if compute.engine == "ray":
        from ratchet.flows.compute.ray_engine import RayEngine

        engine: Any = RayEngine(spec, placement, gen=gen, compute=compute, log=log, holds=holds)
    else:
        engine = LocalEngine(spec, placement, gen=gen, compute=compute, log=log, holds=holds)
    try:
        engine.start(learner)
        yield engine
    finally:
        engine.close()
