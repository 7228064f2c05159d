"""A round's on-policy steps (``grpo.steps_per_round``): per-step processes, or one engine kept loaded.

Per step, generate -> verify -> filter -> train. Two ways to run them:

- **Persistent** (``compute.persistent_rollout``, where ``per_step_reason`` finds nothing against it): one
  ``RolloutWorker`` per device group of the pool holds a generation engine and a ``GRPOLearner`` for the whole
  round (``RolloutGroup``: with several devices the learners are the ranks of one DDP process group and each
  rank's engine samples its shard of the step's prompts from its own replica). After each step's
  pass the learner's weights reach the engine in place (the transformers engine generates from the learner's
  own module; vLLM, and LoRA merged, get a copy); the step's policy gets a ``checkpoints`` row with
  ``path`` NULL and the id ``unsaved_checkpoint_id(parent, training_run)``, so the next step's trajectories
  name it. Only the round's candidate (the last step's policy) is written to disk and hashed.
- **Per step** (everything else, and every one-step round): each step starts generation workers on its
  policy's saved folder and a training process that saves a full checkpoint (``stages.train``).

Resume: a step is done iff its train marker exists, and every done step's rows are in the store. A resumed
persistent round starts from the last saved state, the round's incumbent, and replays the done steps'
training passes on their stored groups (same samples, same seeds: nothing is generated or inserted again),
so the learner, its AdamW moments and the engine hold the policy the first undone step samples from; then
it runs the remaining steps. On CPU the replay is bit-identical; on GPU kernels may make it differ in the
last bits (the ids name what made a policy, parent and training run, not its bytes).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
from prefect import task
from prefect.cache_policies import NONE

from ratchet.common.files import publish_dir
from ratchet.flows.compute.pool import worker_groups
from ratchet.flows.compute.resolve import checkpoint_path, rollout_cap
from ratchet.flows.compute.rollout import RolloutGroup, live_worker, serving
from ratchet.flows.compute.training import grpo_inputs
from ratchet.flows.rounds.context import run_logger
from ratchet.flows.rounds.curriculum_setup import teacher_checkpoint
from ratchet.flows.rounds.frame import StageRun, stage_frame
from ratchet.flows.rounds.progress import bar
from ratchet.flows.rounds.rationalize import rationalize
from ratchet.flows.rounds.rationalized import uses_rationalization
from ratchet.flows.rounds.stages import filter_trajectories, generate, record_training, train, training_run_id, verify
from ratchet.flows.rounds.supervised import filter_sft_data, uses_sft_data
from ratchet.loop.campaign.round_context import Ctx, load_ctx, now, read_marker
from ratchet.loop.checkpoints import parameter_count, unsaved_checkpoint_id, write_checkpoint_manifest
from ratchet.loop.config import RatchetConfig
from ratchet.loop.generation.colocate import dtype_bytes, learner_bytes
from ratchet.store.db import connect, transaction
from ratchet.store.queries import campaign_state
from ratchet.store.retention import DiskSpaceError


def per_step_reason(cfg: RatchetConfig) -> str | None:
    """Why a round runs its on-policy steps in per-step processes; None when the persistent path applies."""
    c, g = cfg.compute, cfg.grpo
    if cfg.algorithm != "grpo" or g.steps_per_round < 2:
        return "one on-policy step per round"
    if not c.persistent_rollout:
        return "compute.persistent_rollout = false"
    if c.engine != "local":
        return f"compute.engine = {c.engine!r} (generation runs as Ray tasks on the cluster, not beside the learner)"
    return None


def rollout_groups(cfg: RatchetConfig) -> list[tuple[str, ...]]:
    """The device groups of the round's rollout workers (one rank each): ``compute.devices`` in groups of vLLM's
    ``tensor_parallel_size``, one device each with transformers."""
    gen = cfg.generation
    return worker_groups(cfg.compute.devices, gen.tensor_parallel_size if gen.backend == "vllm" else 1)


def check_weight_sync(cfg: RatchetConfig, model_dir: Path, shm: Path = Path("/dev/shm")) -> None:
    """Refuse in one line a persistent vLLM round whose weight push cannot fit in ``shm``: after each on-policy step
    each rank writes the policy as one safetensors file there (``VLLMBackend.update_weights``), every tensor in
    ``model.dtype`` (tied embeddings written twice), so N ranks need N times the policy's bytes at once.

    Raises:
        DiskSpaceError: ``shm`` has less free space than that (Docker's default ``/dev/shm`` is 64 MB).
    """
    if cfg.generation.backend != "vllm" or per_step_reason(cfg) is not None or not shm.is_dir():
        return
    ranks = len(rollout_groups(cfg))
    need = ranks * parameter_count(model_dir) * dtype_bytes(cfg.model.dtype)
    free = shutil.disk_usage(shm).free
    if free < need:
        raise DiskSpaceError(
            f"{shm} has {free / 2**20:.0f} MiB free, but the persistent GRPO round pushes the policy into vLLM through "
            f"it: {need / 2**20:.0f} MiB at once ({ranks} rank(s) x {cfg.model.dtype}); give it more (docker run "
            f"--shm-size={-(-need * 5 // 4 // 2**30)}g) or set compute.persistent_rollout = false"
        )


def on_policy_steps(config_path: str, round_index: int, incumbent: str) -> str | None:
    """Run the round's on-policy steps from ``incumbent``; returns the candidate's checkpoint id (None: nothing trained)."""
    ctx = load_ctx(config_path, round_index)
    reason = per_step_reason(ctx.cfg)
    ranks = len(rollout_groups(ctx.cfg))
    with transaction(ctx.db) as con:  # which path ran and why, for `ratchet sql` and the report
        path = f"persistent ({ranks} rank{'s' * (ranks > 1)})" if reason is None else f"per-step: {reason}"
        con.execute("UPDATE rounds SET rollout_path = ? WHERE round_id = ?", [path, ctx.round_id])
    if reason is None:
        return persistent_steps(config_path, round_index, incumbent)
    if ctx.steps > 1:
        run_logger().info("round %d: each on-policy step in its own processes: %s", round_index, reason)
        live = [k + 1 for k in range(ctx.steps) if (read_marker(ctx.at_step(k).stage_dir("train")) or {}).get("saved") is False]
        if live:
            raise RuntimeError(
                f"round {round_index} ran steps {live} with a persistent engine (their policies were never saved), "
                f"but now {reason}; resume it with the settings it started with (compute.persistent_rollout = true)"
            )
    policy, candidate, teacher = incumbent, None, teacher_checkpoint(ctx)
    for step in range(ctx.steps):
        if ctx.cfg.algorithm != "sft":  # a cold-start round trains on reference solutions: no rollouts
            generate(config_path, round_index, step, teacher or policy)  # a teacher's rollouts distil (rft only)
            verify(config_path, round_index, step)
            if uses_rationalization(ctx):  # STaR: hinted rollouts of the prompts nothing solved (rft: one step)
                rationalize(config_path, round_index, teacher or policy)
        (filter_sft_data if uses_sft_data(ctx) else filter_trajectories)(config_path, round_index, step)
        trained = train(config_path, round_index, step, policy)
        if trained is not None:
            policy = candidate = trained
    return candidate


def persistent_steps(config_path: str, round_index: int, incumbent: str) -> str | None:
    """The round's steps with one engine and learner kept loaded (resuming after its done steps); returns the candidate."""
    ctx, log = load_ctx(config_path, round_index), run_logger()
    markers = [read_marker(ctx.at_step(k).stage_dir("train")) for k in range(ctx.steps)]
    done = next((k for k, m in enumerate(markers) if m is None), ctx.steps)
    outputs = [m["checkpoint_id"] for m in markers[:done] if m["checkpoint_id"]]
    if done < ctx.steps:
        with live_round(ctx, incumbent, log) as worker:
            if done:
                log.info("round %d: resuming at step %d; replaying the training of steps 1-%d", round_index, done + 1, done)
            for k in range(done):
                replay_step(worker, ctx.at_step(k))
            for step in range(done, ctx.steps):
                policy = outputs[-1] if outputs else incumbent
                generate(config_path, round_index, step, policy)
                verify(config_path, round_index, step)
                filter_trajectories(config_path, round_index, step)
                trained = train_live(config_path, round_index, step, policy)
                if trained is not None:
                    outputs.append(trained)
    return outputs[-1] if outputs else None


@contextmanager
def live_round(ctx: Ctx, incumbent: str, log: logging.Logger | logging.LoggerAdapter) -> Iterator[RolloutGroup]:
    """The round's rollout workers on the incumbent (one per device group; with several, one DDP process group)
    with their learners loaded, serving the round's generate stages for the block."""
    cfg = ctx.cfg
    with connect(ctx.db, read_only=True) as con:
        base = campaign_state(con, ctx.campaign_id, ctx.eval_set_id()).base_checkpoint_id
    init = checkpoint_path(ctx, incumbent)
    ref = checkpoint_path(ctx, base if cfg.grpo.reference == "base" else incumbent)
    directory = ctx.campaign_dir / f"round-{ctx.round_index}" / "rollout-worker"
    groups = rollout_groups(cfg)
    colocated = learner_bytes(parameter_count(init), cfg.model.dtype, lora=bool(cfg.grpo.lora_r))
    worker = RolloutGroup(
        init,
        directory,
        gen=cfg.generation,
        compute=cfg.compute,
        dtype=cfg.model.dtype,
        log=log,
        groups=groups,
        learner_bytes=colocated,
    )
    with worker, serving(ctx.round_id, worker):
        shared = worker.init_learner(init, cfg.grpo, cfg.model.dtype, ref_dir=ref)
        log.info(
            "round %d: %s loaded once for %d on-policy steps (%s)",
            ctx.round_index,
            "engine and learner" if len(groups) == 1 else f"{len(groups)} ranks, each an engine and a DDP learner,",
            ctx.steps,
            "the engine generates from the learner's module" if shared else "weights copied into the engine each step",
        )
        yield worker


def replay_step(worker: RolloutGroup, ctx: Ctx) -> None:
    """Re-run a done step's training pass on its stored groups (same samples and seed); nothing is written."""
    examples = pq.read_table(ctx.stage_dir("filter") / "examples.parquet").to_pylist()
    if examples:
        worker.train_pass(*grpo_inputs(ctx, examples, rollout_cap(ctx)))


@task(name="train", cache_policy=NONE)
def train_live(config_path: str, round_index: int, step: int, policy: str) -> str | None:
    """This step's GRPO pass in the round's live learner from ``policy``; its weights go into the engine in place.

    Returns the new policy's id: ``unsaved_checkpoint_id(policy, training run)`` with a ``path`` NULL row, or, on
    the round's last step, the saved candidate's manifest id; None when nothing changed.

    Raises:
        RuntimeError: no rollout worker serves the round in this process (call it inside ``persistent_steps``).
    """
    with stage_frame(config_path, round_index, "train", step=step) as s:
        if s.done:
            return s.marker["checkpoint_id"]
        return _train_step(s, policy)


def _train_step(s: StageRun, policy: str) -> str | None:
    """The work of ``train_step`` inside its frame: one GRPO pass on the live worker, then the policy's rows."""
    ctx, log, timer, step = s.ctx, s.log, s.timer, s.ctx.step
    worker = live_worker(ctx.round_id)
    if worker is None:
        raise RuntimeError(
            f"no rollout worker serves {ctx.round_id} in this process; run the round's steps with persistent_steps"
        )
    examples = pq.read_table(ctx.stage_dir("filter") / "examples.parquet").to_pylist()
    run_id, started = training_run_id(ctx, policy, examples), now()
    progress = bar(f"{ctx.round_id}-train-{step}", f"round {ctx.round_index}: grpo (step {step + 1}/{ctx.steps})")
    worker.progress = lambda _name, done, total: progress(done, total)
    with timer.compute():
        res = (
            worker.train_pass(*grpo_inputs(ctx, examples, rollout_cap(ctx)))
            if examples
            else {"steps": 0, "metrics": {}, "kept": []}
        )
    progress(max(res["steps"], 1), max(res["steps"], 1))  # finished (also when no group carried signal)
    trained, last = res["steps"] > 0, step == ctx.steps - 1
    if not trained and not (last and step > 0 and _moved(ctx, policy)):
        log.warning("nothing to train on at step %d (%d rows from the filter stage)", step, len(examples))
        s.finish({"checkpoint_id": None, "metrics": res["metrics"]})
        return None
    if last:  # the round's candidate: the only policy of the round written to disk
        with timer.compute():
            ckpt_id, path = save_candidate(worker, ctx)
    else:
        ckpt_id, path = unsaved_checkpoint_id(policy, run_id), None
    run = run_id if trained else None  # untrained last step: a saved copy of the unsaved policy it started from
    consumed = [examples[i]["trajectory_id"] for i in res["kept"]]
    with transaction(ctx.db) as con:
        row = dict(checkpoint_id=ckpt_id, parent_id=policy, training_run_id=run, path=path)
        record_training(con, ctx, row, run, started, res["metrics"], consumed, policy)
    s.finish({"checkpoint_id": ckpt_id, "training_run_id": run, "saved": path is not None})
    log.info("step %d: %s %s on %d trajectories", step, "saved" if path else "updated in place", ckpt_id, len(consumed))
    return ckpt_id


def _moved(ctx: Ctx, policy: str) -> bool:
    """Whether ``policy`` differs from the round's start (an earlier step of the round trained it)."""
    return any((read_marker(ctx.at_step(k).stage_dir("train")) or {}).get("checkpoint_id") == policy for k in range(ctx.step))


def save_candidate(worker: RolloutGroup, ctx: Ctx) -> tuple[str, str]:
    """Write the learner's policy under the run's checkpoints (atomically, named by its manifest id); returns (id, path)."""
    tmp = ctx.checkpoints_dir / f".tmp-{ctx.round_id}-candidate"
    shutil.rmtree(tmp, ignore_errors=True)
    worker.save(tmp)
    ckpt_id = write_checkpoint_manifest(tmp)
    final = ctx.checkpoints_dir / ckpt_id
    publish_dir(tmp, final)  # same id: same weights, kept
    return ckpt_id, str(final.resolve())
