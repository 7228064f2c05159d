"""The filter stage of rounds that fine-tune on more than verified rollouts (``ratchet.loop.tasks.supervised``).

``algorithm = "sft"`` (a cold start): the round's train prompts' reference solutions, no rollouts.
``sft.general_data``: general SFT records mixed into an sft or rft round's training set at ``sft.general_ratio``.
It writes the same ``filter/examples.parquet`` the train stage reads, each row with its ``origin``.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from ratchet.common.seeds import derive_seed
from ratchet.flows.rounds.observe.run_log import run_logger
from ratchet.flows.rounds.stages.frame import stage_frame
from ratchet.flows.rounds.stages.pipeline import prompt_rows
from ratchet.flows.rounds.stages.rationale_data import rationalized_examples
from ratchet.loop.campaign.round_context import Ctx
from ratchet.loop.tasks.sources import TaskDataError
from ratchet.loop.tasks.supervised import draw_general, general_count, general_examples, load_general_data, reference_examples
from ratchet.store.db import connect, transaction
from ratchet.store.ingest import insert_rows, write_parquet
from ratchet.store.queries import training_set

EXAMPLE_COLUMNS = ("trajectory_id", "prompt_id", "source", "question", "completion", "origin", "messages_json", "prompt_messages")


def uses_sft_data(ctx: Ctx) -> bool:
    """Whether the round's filter stage is this one (a cold-start round, or general data mixed in)."""
    return ctx.cfg.algorithm == "sft" or (ctx.cfg.algorithm == "rft" and ctx.cfg.sft.general_data is not None)


def reference_rows(ctx: Ctx) -> list[dict]:
    """The round's train prompts' reference solutions as example rows; the prompts are ingested for lineage.

    Raises:
        TaskDataError: none of the drawn prompts has a reference solution.
    """
    prompts = ctx.train_prompts()
    rows, missing = reference_examples(prompts)
    if not rows:
        raise TaskDataError(
            f"algorithm 'sft' needs reference solutions, and none of the round's {len(prompts)} train prompts has one; "
            "use task sources with a 'solution' field (or solution_field = ...)"
        )
    if missing:
        run_logger().warning("%d of %d train prompts have no reference solution; trained on the rest", len(missing), len(prompts))
    with transaction(ctx.db) as con:
        insert_rows(con, "prompts", prompt_rows(prompts))
    return rows


def sft_rows(ctx: Ctx) -> list[dict]:
    """The round's training examples: reference solutions (sft) or verified rollouts (rft), plus general data."""
    cfg = ctx.cfg
    if cfg.algorithm == "sft":
        rows = reference_rows(ctx)
    else:
        with connect(ctx.db, read_only=True) as con:
            rows = [
                {**r, "origin": "rollout"} for r in training_set(con, ctx.round_id, ctx.verifier_version, cfg.sft.max_per_prompt)
            ]
            rows += rationalized_examples(con, ctx)
    if cfg.sft.general_data is not None:
        k = general_count(len(rows), cfg.sft.general_ratio)
        picked = draw_general(
            load_general_data(cfg.sft.general_data), k, derive_seed("general_data", cfg.sft.seed, ctx.round_index)
        )
        rows += general_examples(picked)
    return [{c: r.get(c) for c in EXAMPLE_COLUMNS} for r in rows]


@task(name="filter", cache_policy=NONE)
def filter_sft_data(config_path: str, round_index: int, step: int = 0) -> str:
    """Write the round's training examples (``sft_rows``) where the train stage reads them; returns the file's path."""
    with stage_frame(config_path, round_index, "filter", step=step) as s:
        path = s.out / "examples.parquet"
        if not s.done:
            rows = sft_rows(s.ctx)
            write_parquet(rows, path)
            origins: dict[str, int] = {}
            for r in rows:
                origins[r["origin"]] = origins.get(r["origin"], 0) + 1
            s.finish({"n": len(rows), "origins": origins})
            s.log.info("training examples by origin: %s", origins)
    return str(path)
