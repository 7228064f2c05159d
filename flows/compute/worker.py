"""An engine rank's process: ``python -m ratchet.flows.compute.worker serve --fd N`` (see ``ratchet.flows.compute.engine``).

The rank loads its generation backend once (``Start``), then answers the parent's typed requests
(``ratchet.flows.compute.messages``) on its end of a socket pair, one at a time, until ``Stop``: generate a shard
of jobs, load a checkpoint's weights into the engine (``Sync``), start a co-located ``GRPOLearner`` and run its passes
(the new weights reach the engine in place), run a rejection-sampling fine-tuning pass, save the learner's policy. A
request that fails is answered with its error. With several ranks (``WORLD_SIZE`` > 1) the rank first joins the
round's ``torch.distributed`` group through a ``file://`` store in a private folder (``init_rendezvous``).

Output: log records go to stdout as ``LEVEL name: message``; progress as ``ratchet.flows.compute.protocol.PROGRESS_PREFIX``
lines. The process leads its own process group and kills that group when its parent dies, so a
``kill -9`` of the round leaves no rank or engine process behind. Opens neither the store nor Prefect.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import threading
import time

from ratchet.common.procs import alive, signal_tree
from ratchet.flows.compute.messages import EngineSpec, Generate, GRPOStep, Reply, Save, SFTStep, Start, StartLearner, Stop, Sync
from ratchet.flows.compute.protocol import PROGRESS_PREFIX


def exit_with_parent(poll_s: float = 0.2) -> None:
    """Start a daemon thread that kills this process's group as soon as its parent or the pool's parent is gone.

    Polls ``os.getppid()`` (it changes when the direct parent dies) and the process named by
    ``RATCHET_POOL_PARENT`` (set by ``ratchet.flows.compute.pool``; under ``accelerate launch`` the direct parent is the
    launcher, which would outlive the round). Works while the main thread is in native code (torch
    releases the GIL), unlike a signal handler.
    """
    parent = os.getppid()
    pool_parent = int(os.environ.get("RATCHET_POOL_PARENT", "0")) or parent

    def watch() -> None:
        while os.getppid() == parent and alive(pool_parent):
            time.sleep(poll_s)
        signal_tree(os.getpgrp())  # this process's whole group (engine processes included)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def progress_printer(bar: str, every_s: float = 0.5):
    """A ``(done, total)`` callback printing throttled progress lines for the parent (the last one always)."""
    last = [float("-inf")]

    def report(done: float, total: float) -> None:
        now = time.monotonic()
        if done >= total or now - last[0] >= every_s:
            last[0] = now
            print(PROGRESS_PREFIX + json.dumps({"bar": bar, "done": int(done), "total": int(total)}), flush=True)

    return report


def init_rendezvous() -> None:
    """Form this rank's ``torch.distributed`` process group from a ``file://`` store in the round's private folder
    (``RATCHET_RENDEZVOUS``, a 0700 directory the parent made): nothing listens on a port, so no other user or host
    can join or set keys. Accelerate and DDP then use this group. No-op for a one-rank engine."""
    path, world = os.environ.get("RATCHET_RENDEZVOUS"), int(os.environ.get("WORLD_SIZE", "1"))
    if not path or world < 2:
        return
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    backend = "cuda:nccl,cpu:gloo" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, init_method=f"file://{path}", rank=int(os.environ["RANK"]), world_size=world)


class EngineState:
    """One rank's loaded engine and learner, and the handler of every request (``ratchet.flows.compute.messages``).

    The same object serves a child process (``run_serve``) and a Ray actor (``ratchet.flows.compute.ray_engine``).
    """

    def __init__(self, log: logging.Logger | None = None) -> None:
        self.log = log or logging.getLogger("ratchet.flows.compute.worker")
        self.backend = None
        self.learner = None  # the co-located GRPOLearner, once StartLearner made it

    def handle(self, msg) -> Reply:
        """Run one request; a request that fails is answered with its error (the rank stays up: the parent decides)."""
        t0 = time.perf_counter()
        try:
            value = self._dispatch(msg)
        except (ValueError, RuntimeError, OSError, KeyError, TypeError) as e:
            self.log.error("engine rank: %s failed: %s", type(msg).__name__, e)
            return Reply(False, error=f"{type(e).__name__}: {e}", seconds=time.perf_counter() - t0)
        return Reply(True, value, seconds=time.perf_counter() - t0)

    def _dispatch(self, msg):
        if isinstance(msg, Start):
            return self._start(msg.engine)
        if self.backend is None:
            raise ValueError(f"engine request {type(msg).__name__} before Start; start the engine first")
        if isinstance(msg, Generate):
            from ratchet.loop.generation.sampling import SamplingParams

            params = msg.params if isinstance(msg.params, SamplingParams) else SamplingParams(**msg.params)
            jobs = range(*msg.jobs) if msg.jobs else None
            return self.backend.generate(msg.messages, params, progress=progress_printer(msg.name), jobs=jobs)
        if isinstance(msg, Sync):
            return self._sync(msg.path)
        if isinstance(msg, StartLearner):
            return self._start_learner(msg)
        if isinstance(msg, GRPOStep):
            return self._grpo_step(msg)
        if isinstance(msg, SFTStep):
            return self._sft_step(msg)
        if isinstance(msg, Save):
            if self.learner is None:
                raise ValueError("engine request Save before StartLearner; the round has no learner to save")
            self.learner.save(msg.out, msg.optimizer_state)
            return None
        raise ValueError(
            f"unknown engine request {type(msg).__name__}; valid: Start, Generate, Sync, StartLearner, GRPOStep, SFTStep, "
            "Save, Stop"
        )

    def _start(self, spec: EngineSpec) -> dict:
        from ratchet.loop.generation.backends import make_backend

        init_rendezvous()
        device = os.environ.get("RATCHET_DEVICE", "cpu")
        t0 = time.perf_counter()
        kwargs = colocated_engine_kwargs(spec, device, self.log)
        self.backend = make_backend(spec.backend, spec.model_path, device=device, **kwargs)
        load_s = time.perf_counter() - t0
        self.log.info("engine rank: %s backend on %s loaded in %.1f s", spec.backend, device, load_s)
        return {"load_s": load_s}

    def _sync(self, path: str) -> None:
        if self.backend.shared:  # the learner's module: its training is over once another checkpoint is wanted
            self.learner, self.backend.shared = None, False
        self.backend.update_weights(path)

    def _start_learner(self, msg: StartLearner) -> bool:
        from ratchet.loop.config import GRPOConfig
        from ratchet.loop.train.grpo import GRPOLearner

        self.learner = GRPOLearner(msg.init_dir, GRPOConfig(**msg.grpo), ref_dir=msg.ref_dir, dtype=msg.dtype)
        # transformers engine: generate from the learner's own module (no copy per pass, one set of weights held)
        policy = self.learner.policy_module()
        return policy is not None and self.backend.share_module(policy)

    def _grpo_step(self, msg: GRPOStep) -> dict:
        from dataclasses import replace

        if self.learner is None:
            raise ValueError("engine request GRPOStep before StartLearner; start the learner first")
        report = progress_printer("train")
        with self._asleep():
            # the engine in this process generated the samples: from the learner's own module when shared
            res = self.learner.train_pass(
                msg.samples, replace(msg.run, engine_shared=self.backend.shared), on_step=lambda k, n, _m: report(k, n)
            )
        if res.steps and not self.backend.shared:
            self.backend.update_weights(self.learner.state_dict())
        return {"metrics": {**res.metrics, "steps": res.step_metrics}, "kept": res.kept, "steps": res.steps}

    def _sft_step(self, msg: SFTStep) -> dict:
        from ratchet.loop.config import SFTConfig
        from ratchet.loop.train.sft import train_sft

        report = progress_printer("train")
        with self._asleep():
            res = train_sft(
                msg.init_dir,
                msg.examples,
                msg.out,
                SFTConfig(**msg.sft),
                seed=msg.seed,
                dtype=msg.dtype,
                on_step=lambda s, n, _loss: report(s, n),
            )
        saved = res.checkpoint_dir
        return {"saved": str(saved) if saved else None, "metrics": res.metrics}

    @contextlib.contextmanager
    def _asleep(self):
        """A co-located vLLM engine frees the GPU while the learner trains (sleep mode), and wakes after."""
        slept = getattr(self.backend, "sleep", lambda: False)()
        try:
            yield
        finally:
            if slept:
                self.backend.wake_up()

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()
            self.backend = None


def run_serve(fd: int) -> None:
    """An engine rank: answer the parent's requests on connection ``fd`` (a socket pair's end) in order until
    ``Stop`` or the parent's end closes."""
    from multiprocessing.connection import Connection

    conn, state = Connection(fd), EngineState()
    try:
        while True:
            try:
                msg = conn.recv()
            except EOFError:  # the parent is gone (exit_with_parent kills the group too)
                return
            if isinstance(msg, Stop):
                conn.send(Reply(True))
                return
            conn.send(state.handle(msg))
    finally:
        state.close()


def colocated_engine_kwargs(spec: EngineSpec, device: str, log: logging.Logger) -> dict:
    """The engine's keyword arguments; a vLLM engine on a GPU that a learner will share (``spec.learner_bytes``)
    gets the memory share the learner leaves (``ratchet.loop.generation.colocate``) and sleep mode.

    Raises:
        ValueError: the learner leaves the engine too little of the GPU (the message says what to change).
    """
    kwargs = dict(spec.backend_kwargs)
    if spec.backend != "vllm" or not spec.learner_bytes or device == "cpu":
        return kwargs
    import torch

    from ratchet.loop.generation.colocate import engine_memory_share

    total = torch.cuda.mem_get_info()[1]
    share = engine_memory_share(kwargs.get("gpu_memory_utilization", 0.9), int(spec.learner_bytes), total)
    log.info(
        "co-located vLLM: gpu_memory_utilization %.2f (the learner holds %.1f GiB), sleep mode on",
        share,
        spec.learner_bytes / 2**30,
    )
    return {**kwargs, "gpu_memory_utilization": share, "enable_sleep_mode": True}


def _pin_cpus() -> None:
    cpus = os.environ.get("RATCHET_CPU_AFFINITY")
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m ratchet.flows.compute.worker",
        description="Ratchet engine rank (started by ratchet.flows.compute.engine).",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("serve")
    v.add_argument("--fd", type=int, required=True, help="this rank's end of the parent's socket pair")
    args = ap.parse_args(argv)
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", force=True)
    exit_with_parent()
    _pin_cpus()
    run_serve(args.fd)


if __name__ == "__main__":
    main()
