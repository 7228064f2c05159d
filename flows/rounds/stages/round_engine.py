"""The round's engine as the round flow holds it: opened once at the round's start on the incumbent, closed at its end.

``round_engine`` builds the engine a round needs from its config (``ratchet.flows.compute.engine``: the placement
from ``compute.devices``, a GRPO learner when GRPO steps remain, the co-located learner's memory share) and records
the placement in ``rounds.rollout_path``. Every stage that samples (rollouts, rationalization, held-out evaluation)
calls ``sample``, which first loads the wanted checkpoint's weights into the engine when it holds another
(``sync``): a GRPO round's steps sample from the learner's own policy with no copy; an RFT round's candidate is
loaded once, for its evaluation.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ratchet.flows.compute.engine import Placement, RoundEngine, open_engine
from ratchet.flows.compute.messages import StartLearner, engine_spec
from ratchet.flows.compute.pool import worker_groups
from ratchet.flows.compute.resolve import checkpoint_path
from ratchet.flows.rounds.observe.progress import bar
from ratchet.flows.rounds.observe.run_log import run_logger
from ratchet.loop.campaign.round_context import Ctx, read_marker
from ratchet.loop.checkpoints import parameter_count
from ratchet.loop.config import RatchetConfig
from ratchet.loop.generation.colocate import dtype_bytes, learner_bytes
from ratchet.loop.generation.sampling import Completion, SamplingParams
from ratchet.store.db import connect, transaction
from ratchet.store.queries import campaign_state
from ratchet.store.retention import DiskSpaceError


def rank_groups(cfg: RatchetConfig) -> list[tuple[str, ...]]:
    """The device groups of the round's engine ranks: ``compute.devices`` in groups of vLLM's
    ``tensor_parallel_size``, one device each with transformers."""
    gen = cfg.generation
    return worker_groups(cfg.compute.devices, gen.tensor_parallel_size if gen.backend == "vllm" else 1)


def grpo_steps_left(ctx: Ctx) -> bool:
    """Whether a GRPO round still has on-policy steps to train (its learner must be loaded)."""
    return ctx.cfg.algorithm == "grpo" and any(read_marker(ctx.at_step(k).stage_dir("train")) is None for k in range(ctx.steps))


@contextmanager
def round_engine(ctx: Ctx, incumbent: str) -> Iterator[RoundEngine]:
    """The round's engine on ``incumbent`` for the block (with its GRPO learner when steps remain to train)."""
    cfg, log = ctx.cfg, run_logger()
    init = checkpoint_path(ctx, incumbent)
    learner = None
    if grpo_steps_left(ctx):
        with connect(ctx.db, read_only=True) as con:
            base = campaign_state(con, ctx.campaign_id, ctx.eval_set_id()).base_checkpoint_id
        ref = checkpoint_path(ctx, base if cfg.grpo.reference == "base" else incumbent)
        learner = StartLearner(str(init), cfg.grpo.model_dump(mode="json"), cfg.model.dtype, str(ref))
    lora = cfg.grpo.lora_r if cfg.algorithm == "grpo" else cfg.sft.lora_r
    spec = engine_spec(
        init, cfg.generation, cfg.model.dtype, learner_bytes(parameter_count(init), cfg.model.dtype, lora=bool(lora))
    )
    placement = Placement(tuple(rank_groups(cfg)), cfg.compute.fsdp)
    with transaction(ctx.db) as con:  # how the round ran, for `ratchet sql` and the report
        con.execute("UPDATE rounds SET rollout_path = ? WHERE round_id = ?", [placement.describe(), ctx.round_id])
    with open_engine(
        spec, placement, gen=cfg.generation, compute=cfg.compute, log=log, holds=incumbent, learner=learner
    ) as engine:
        log.info(
            "round %d: engine loaded once for the round (%s%s)",
            ctx.round_index,
            placement.describe(),
            ""
            if learner is None
            else "; the engine generates from the learner's module"
            if engine.shared
            else "; weights copied into the engine after each pass",
        )
        yield engine


@contextmanager
def engine_for(ctx: Ctx, checkpoint_id: str, engine: RoundEngine | None) -> Iterator[RoundEngine]:
    """``engine`` (a round's), or, outside a round (a tool evaluating one checkpoint), an engine on ``checkpoint_id``
    for the block."""
    if engine is not None:
        yield engine
        return
    cfg = ctx.cfg
    spec = engine_spec(checkpoint_path(ctx, checkpoint_id), cfg.generation, cfg.model.dtype)
    placement = Placement(tuple(rank_groups(cfg)), False)
    with open_engine(spec, placement, gen=cfg.generation, compute=cfg.compute, log=run_logger(), holds=checkpoint_id) as e:
        yield e


def sample(
    ctx: Ctx,
    engine: RoundEngine,
    checkpoint_id: str,
    chats: list[list[dict[str, str]]],
    params: SamplingParams,
    desc: str,
    jobs: range | None = None,
    progress: Callable[[float, float], None] | None = None,
) -> list[Completion]:
    """``params.n`` completions per chat from ``checkpoint_id`` (loaded into the engine first when it holds another
    checkpoint), with a progress bar named ``desc``.

    Args:
        jobs: only these of the flattened (prompt_index, sample_index) jobs (a resumable stage's batch, see
            ``rollout_batches``); ``None`` = all.
        progress: report ``(done, total)`` of this call here instead of a bar of its own (the caller's bar
            spans several calls).
    """
    if engine.holds != checkpoint_id:
        seconds = engine.sync(checkpoint_path(ctx, checkpoint_id), checkpoint_id)
        run_logger().info("engine: loaded %s in %.1f s", checkpoint_id, seconds)
    progress = progress or bar(f"{ctx.round_id}-{desc}", desc)
    engine.progress = lambda _name, done, total: progress(done, total)
    try:
        out = engine.generate(chats, params, jobs=jobs) if jobs is not None else engine.generate(chats, params)
    finally:
        engine.progress = None
    # Ranks report progress on their stdout, which the parent reads on another thread: the last line may still be in
    # flight when the reply arrives (and is then dropped), so the finished count is reported here.
    progress(len(out), len(out))
    return out


def check_weight_sync(cfg: RatchetConfig, model_dir: Path, shm: Path = Path("/dev/shm")) -> None:
    """Refuse in one line a vLLM round whose weight push cannot fit in ``shm``: after each GRPO pass each rank writes the
    policy as one safetensors file there (``VLLMBackend.update_weights``), every tensor in ``model.dtype`` (tied
    embeddings written twice), so N ranks need N times the policy's bytes at once.

    Raises:
        DiskSpaceError: ``shm`` has less free space than that (Docker's default ``/dev/shm`` is 64 MB).
    """
    if cfg.generation.backend != "vllm" or cfg.algorithm != "grpo" or not shm.is_dir():
        return
    ranks = len(rank_groups(cfg))
    need = ranks * parameter_count(model_dir) * dtype_bytes(cfg.model.dtype)
    free = shutil.disk_usage(shm).free
    if free < need:
        raise DiskSpaceError(
            f"{shm} has {free / 2**20:.0f} MiB free, but a GRPO round pushes the policy into vLLM through it: "
            f"{need / 2**20:.0f} MiB at once ({ranks} rank(s) x {cfg.model.dtype}); give it more (docker run "
            f"--shm-size={-(-need * 5 // 4 // 2**30)}g)"
        )
