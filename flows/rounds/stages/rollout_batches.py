"""Resumable generation: a stage's rollouts committed in batches, so a resumed round samples only what is missing.

A round killed late in generation (a night's crash, ``kill -9``, a lost machine) used to regenerate every rollout of
the stage. ``batch_rollouts`` splits a call's flattened (prompt_index, sample_index) job list into **commit batches**
of ``commit_unit`` jobs (whole engine batches on every rank) and writes each batch's trajectory rows, as soon as it is
sampled, to an immutable Parquet shard (the ``trajectories`` schema the ingest knows) under the stage directory::

    <stage dir>/batches/<call key>/batch-00000.parquet ...

A resumed stage reads the shards that exist and generates only the missing batches. The transformers backend seeds
each engine batch by its global index (``sampling.batch_seed``), and a commit batch is whole engine batches, so a
resumed round's rollouts are the same tokens, texts and trajectory ids as an uninterrupted one's. The call key hashes
everything the rows depend on (policy, prompt ids, sampling settings, the commit unit): shards of another setting are
never read. The stage deletes the folder once its own Parquet and marker are written.

vLLM batches are resumable too (whole prompt groups), but vLLM on CPU seeds only its engine, not a request: a resumed
batch is a fresh sample of the same prompts. Prompts of a source with an ``environment`` (multi-turn episodes) are
sampled in one call, not batched.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pyarrow.parquet as pq

from ratchet.flows.compute.engine import RoundEngine
from ratchet.flows.rounds.observe.progress import bar
from ratchet.flows.rounds.stages.multi_turn import environment_sources, sample_prompts
from ratchet.flows.rounds.stages.round_engine import sample
from ratchet.loop.campaign.round_context import Ctx, short_hash
from ratchet.loop.generation.sampling import Completion, SamplingParams, job_alignment
from ratchet.loop.tasks.sources import Prompt
from ratchet.store.ingest import write_parquet

BATCHES_DIR = "batches"


class Batched(NamedTuple):
    """What ``batch_rollouts`` returns: every row, and how many commit batches there were and were read back."""

    rows: list[dict]
    batches: int
    resumed: int  # batches whose shard existed (committed before a stop): read back, not sampled


def commit_unit(backend: str, params: SamplingParams, batch_size: int, ranks: int) -> int:
    """Jobs per commit batch: one engine batch on every rank (transformers: ``batch_size`` jobs, the unit its seeds
    are fixed in; vLLM: the whole prompt groups that fill ``batch_size``), so a batch splits over the ranks exactly as
    a whole call would."""
    align = job_alignment(backend, params, batch_size)
    return align * max(1, -(-batch_size // align)) * max(1, ranks)


def batch_rollouts(
    ctx: Ctx,
    engine: RoundEngine,
    policy: str,
    prompts: list[Prompt],
    params: SamplingParams,
    desc: str,
    stage_dir: Path,
    to_rows: Callable[[list[Completion]], list[dict]],
) -> Batched:
    """The trajectory rows of ``params.n`` rollouts of each prompt from ``policy``, batch by batch, each batch's rows
    committed to a shard under ``stage_dir / "batches"`` before the next is sampled; batches with a shard are read
    back, not sampled again.

    Args:
        to_rows: completions -> their ``trajectories`` rows (``pipeline.trajectory_rows`` bound to the call).

    Returns:
        every row, in (prompt_index, sample_index) order, with the batch counts.
    """
    if any(p.source in environment_sources(ctx) for p in prompts):  # episodes: one call, not resumable by batch
        return Batched(to_rows(sample_prompts(ctx, engine, policy, prompts, params, desc)), 1, 0)
    g = ctx.cfg.generation
    unit = commit_unit(g.backend, params, g.batch_size, engine.ranks)
    settings = json.dumps({k: v for k, v in vars(params).items()}, default=list, sort_keys=True)
    folder = stage_dir / BATCHES_DIR / short_hash(policy, [p.prompt_id for p in prompts], settings, unit, g.backend)
    chats = [ctx.messages(p) for p in prompts]
    total = len(prompts) * params.n
    progress = bar(f"{ctx.round_id}-{desc}", desc)
    rows: list[dict] = []
    starts = range(0, total, unit)
    resumed = 0
    for k, start in enumerate(starts):
        jobs = range(start, min(start + unit, total))
        shard = folder / f"batch-{k:05d}.parquet"
        if shard.is_file():
            got = pq.read_table(shard).to_pylist()
            resumed += 1
        else:
            at = len(rows)
            comps = sample(
                ctx, engine, policy, chats, params, desc, jobs=jobs, progress=lambda d, _t, at=at: progress(at + d, total)
            )
            got = to_rows(comps)
            write_parquet(got, shard, "trajectories")
        rows += got
        progress(len(rows), total)
    return Batched(rows, len(starts), resumed)


def drop_batches(stage_dir: Path) -> None:
    """Delete a finished stage's commit batches (its own Parquet holds every row now)."""
    shutil.rmtree(stage_dir / BATCHES_DIR, ignore_errors=True)
