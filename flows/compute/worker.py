"""Child entry point of the device pool: ``python -m ratchet.flows.compute.worker generate|train ...`` (see ``ratchet.flows.compute.pool``).

``generate --request R.json --shard K`` loads the request's checkpoint into one backend on this
process's device (pinned by the parent through ``CUDA_VISIBLE_DEVICES``), runs shard ``K`` of each call
and writes each call's completions to its shard file. ``serve --dir D`` is a persistent rollout worker: one engine for a whole round, serving
generate and update-weights requests written into ``D`` (``ratchet.flows.compute.rollout``). ``train --config C
--round N --init-dir DIR [--ref-dir DIR] --max-completion-length N --out DIR --result R.json`` runs the round's training pass (``ratchet.flows.compute.training.train_compute``) into ``DIR``
and writes ``{"saved", "metrics", "consumed"}`` to ``R.json`` (on rank 0 under ``accelerate launch``).

Output: log records go to stdout as ``LEVEL name: message``; progress as ``ratchet.flows.compute.protocol.PROGRESS_PREFIX``
lines. The process leads its own process group and kills that group when its parent dies, so a
``kill -9`` of the round leaves no worker or engine process behind.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

from ratchet.common.files import atomic_write_text
from ratchet.common.procs import alive, signal_tree
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


def run_generate(request_path: Path, shard: int) -> None:
    """Run shard ``shard`` of every call in the request; skip calls whose shard file exists."""
    from ratchet.flows.compute.protocol import shard_file, write_shard
    from ratchet.loop.generation.backends import make_backend
    from ratchet.loop.generation.base import SamplingParams

    req = json.loads(request_path.read_text())
    key = request_path.stem
    todo = [
        c
        for c in req["calls"]
        if shard < len(c["shards"]) and not shard_file(request_path.parent, key, c["name"], shard).exists()
    ]
    if not todo:
        return
    log = logging.getLogger("ratchet.flows.compute.worker")
    device = os.environ.get("RATCHET_DEVICE", "cpu")
    t0 = time.perf_counter()
    backend = make_backend(req["backend"], req["model_path"], device=device, **req["backend_kwargs"])
    log.info("loaded %s backend on %s in %.1f s", req["backend"], device, time.perf_counter() - t0)
    try:
        for c in todo:
            start, stop = c["shards"][shard]
            t1 = time.perf_counter()
            comps = backend.generate(
                req["messages"], SamplingParams(**c["params"]), progress=progress_printer(c["name"]), jobs=range(start, stop)
            )
            ntok = sum(x.completion_tokens for x in comps)
            dt = time.perf_counter() - t1
            write_shard(shard_file(request_path.parent, key, c["name"], shard), comps)
            log.info(
                "%s: jobs %d-%d, %d tokens in %.1f s (%.1f tokens/s)", c["name"], start, stop, ntok, dt, ntok / max(dt, 1e-9)
            )
    finally:
        backend.close()


def ray_generate_shard(request_path: str, shard: int, env: dict[str, str]) -> str:
    """Body of a Ray task (``compute.engine = "ray"``): ``run_generate`` of one shard inside a Ray worker process,
    with the pool's device environment (thread count; Ray itself assigns GPUs). Returns the Ray node's IP."""
    os.environ.update(env)
    if env.get("OMP_NUM_THREADS"):
        import torch

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", force=True)
    run_generate(Path(request_path), shard)
    import socket

    return socket.gethostname()


def run_serve(directory: Path, poll_s: float = 0.02) -> None:
    """A persistent rollout worker: load ``directory/engine.json``'s backend once, then answer the parent's requests
    (``protocol.request_file``: generate into a shard file, update weights in place, stop) in sequence order until
    "stop". A request that fails is answered with its error and the worker stays up; the parent decides."""
    from ratchet.flows.compute.protocol import request_file, response_file
    from ratchet.loop.generation.backends import make_backend

    spec = json.loads((directory / "engine.json").read_text())
    log = logging.getLogger("ratchet.flows.compute.worker")
    device = os.environ.get("RATCHET_DEVICE", "cpu")
    t0 = time.perf_counter()
    kwargs = colocated_engine_kwargs(spec, device, log)
    backend = make_backend(spec["backend"], spec["model_path"], device=device, **kwargs)
    log.info("rollout worker: %s backend on %s loaded in %.1f s", spec["backend"], device, time.perf_counter() - t0)
    atomic_write_text(directory / "ready.json", json.dumps({"load_s": time.perf_counter() - t0}))
    seq, learner = 0, {}
    try:
        while True:
            path = request_file(directory, seq)
            if not path.exists():
                time.sleep(poll_s)
                continue
            req = json.loads(path.read_text())
            if req["op"] == "stop":
                atomic_write_text(response_file(directory, seq), json.dumps({"ok": True}))
                return
            try:
                resp = _serve_one(backend, req, learner)
            except (ValueError, RuntimeError, OSError, KeyError, TypeError) as e:  # answered; the parent raises it
                log.error("rollout worker: request %d (%s) failed: %s", seq, req.get("op"), e)
                resp = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            atomic_write_text(response_file(directory, seq), json.dumps(resp))
            seq += 1
    finally:
        backend.close()


def colocated_engine_kwargs(spec: dict, device: str, log: logging.Logger) -> dict:
    """The engine's keyword arguments; a vLLM engine on a GPU that a learner will share (``spec["learner_bytes"]``)
    gets the memory share the learner leaves (``ratchet.loop.generation.colocate``) and sleep mode.

    Raises:
        ValueError: the learner leaves the engine too little of the GPU (the message says what to change).
    """
    kwargs = dict(spec["backend_kwargs"])
    if spec["backend"] != "vllm" or not spec.get("learner_bytes") or device == "cpu":
        return kwargs
    import torch

    from ratchet.loop.generation.colocate import engine_memory_share

    total = torch.cuda.mem_get_info()[1]
    share = engine_memory_share(kwargs.get("gpu_memory_utilization", 0.9), int(spec["learner_bytes"]), total)
    log.info(
        "co-located vLLM: gpu_memory_utilization %.2f (the learner holds %.1f GiB), sleep mode on",
        share,
        spec["learner_bytes"] / 2**30,
    )
    return {**kwargs, "gpu_memory_utilization": share, "enable_sleep_mode": True}


def _serve_one(backend, req: dict, learner: dict) -> dict:
    """One request. ``learner`` holds the co-located ``GRPOLearner`` (key "grpo") once "learner_init" made it."""
    from ratchet.flows.compute.protocol import read_samples, write_shard
    from ratchet.loop.generation.base import SamplingParams

    t0 = time.perf_counter()
    op = req["op"]
    if op == "update_weights":
        backend.update_weights(req["path"])
        return {"ok": True, "seconds": time.perf_counter() - t0}
    if op == "learner_init":
        from ratchet.loop.config import GRPOConfig
        from ratchet.loop.train.grpo import GRPOLearner

        s = GRPOConfig(**req["grpo"])
        learner["grpo"] = GRPOLearner(req["init_dir"], s, ref_dir=req.get("ref_dir"), dtype=req["dtype"])
        # transformers engine: generate from the learner's own module (no copy per pass, one set of weights held)
        policy = learner["grpo"].policy_module()
        shared = policy is not None and backend.share_module(policy)
        return {"ok": True, "seconds": time.perf_counter() - t0, "shared": shared}
    if op in ("train_pass", "save") and "grpo" not in learner:
        raise ValueError(f"rollout request {op!r} before 'learner_init'; initialise the learner first")
    if op == "train_pass":  # one pass, then its weights straight into this process's engine (no file, no checkpoint)
        from ratchet.loop.train.grpo import GRPORun

        report = progress_printer("train")
        slept = getattr(backend, "sleep", lambda: False)()  # a co-located vLLM engine frees the GPU meanwhile
        try:
            res = learner["grpo"].train_pass(
                # the engine in this process generated the samples: from the learner's own module when shared
                read_samples(Path(req["samples"])),
                GRPORun(**{**req["run"], "engine_shared": backend.shared}),
                on_step=lambda k, n, _m: report(k, n),
            )
        finally:
            if slept:
                backend.wake_up()
        if res.steps and not backend.shared:
            backend.update_weights(learner["grpo"].state_dict())
        metrics = {**res.metrics, "steps": res.step_metrics}
        return {"ok": True, "seconds": time.perf_counter() - t0, "metrics": metrics, "kept": res.kept, "steps": res.steps}
    if op == "save":
        learner["grpo"].save(req["out"], req.get("optimizer_state"))
        return {"ok": True, "seconds": time.perf_counter() - t0}
    if op != "generate":
        raise ValueError(
            f"unknown rollout request op {op!r}; valid: generate, update_weights, learner_init, train_pass, save, stop"
        )
    jobs = range(*req["jobs"]) if req.get("jobs") else None
    comps = backend.generate(req["messages"], SamplingParams(**req["params"]), progress=progress_printer(req["name"]), jobs=jobs)
    write_shard(Path(req["out"]), comps)
    return {"ok": True, "seconds": time.perf_counter() - t0, "tokens": sum(c.completion_tokens for c in comps)}


def run_train(
    config: str,
    round_index: int,
    init_dir: Path,
    ref_dir: Path | None,
    out: Path,
    result: Path,
    step: int = 0,
    *,
    max_completion_length: int,
) -> None:
    """The round's training pass into ``out`` from the checkpoint folders the parent resolved; rank 0 writes the
    result file atomically. Opens no store."""
    import pyarrow.parquet as pq

    from ratchet.flows.compute.training import train_compute
    from ratchet.loop.campaign.round_context import load_ctx

    ctx = load_ctx(config, round_index, step)
    examples = pq.read_table(ctx.stage_dir("filter") / "examples.parquet").to_pylist()
    saved, metrics, consumed = train_compute(
        ctx, init_dir, ref_dir, examples, out, progress_printer("train"), max_completion_length=max_completion_length
    )
    if int(os.environ.get("RANK", "0")) == 0:
        atomic_write_text(result, json.dumps({"saved": str(saved) if saved else None, "metrics": metrics, "consumed": consumed}))


def _pin_cpus() -> None:
    cpus = os.environ.get("RATCHET_CPU_AFFINITY")
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m ratchet.flows.compute.worker",
        description="Ratchet device-pool worker (started by ratchet.flows.compute.pool).",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--request", type=Path, required=True)
    g.add_argument("--shard", type=int, required=True)
    t = sub.add_parser("train")
    t.add_argument("--config", required=True)
    t.add_argument("--round", type=int, required=True)
    t.add_argument("--step", type=int, default=0)
    t.add_argument("--init-dir", type=Path, required=True, help="verified folder of the policy to start from")
    t.add_argument("--ref-dir", type=Path, default=None, help="verified folder of GRPO's reference model")
    t.add_argument("--max-completion-length", type=int, required=True, help="the round's rollout cap, tokens")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--result", type=Path, required=True)
    v = sub.add_parser("serve")
    v.add_argument("--dir", type=Path, required=True)
    args = ap.parse_args(argv)
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", force=True)
    exit_with_parent()
    _pin_cpus()
    if args.cmd == "generate":
        run_generate(args.request, args.shard)
    elif args.cmd == "serve":
        run_serve(args.dir)
    else:
        run_train(
            args.config,
            args.round,
            args.init_dir,
            args.ref_dir,
            args.out,
            args.result,
            args.step,
            max_completion_length=args.max_completion_length,
        )


if __name__ == "__main__":
    main()
