"""The GRPO round on a pool of 2 CPU ranks against the same round on 1 rank, both on the round engine, in one run.

Runs two real GRPO rounds (SmolLM2-135M-Instruct, the demo's arithmetic tasks, Prefect flow, DuckDB file) from the
same base and seed: ``compute.devices = ["cpu", "cpu"]`` (2 ranks, each a transformers engine and a DDP learner
(gloo) kept loaded for all ``--steps`` on-policy steps; each rank samples its shard of a step's rollouts from its
own replica) and ``["cpu"]`` (1 rank process with both cores). Only the candidate is saved in either.

A step's seconds are the wall seconds of its generate, verify, filter and train stages (their markers). Both
candidates are compared tensor by tensor (``max_rel_param_diff``: max over tensors of ||W_2 - W_1|| / ||W_base||).

Last line: JSON ``{"ranks": 2, "two_rank_s_per_step", "one_rank_s_per_step", "ratio", "max_rel_param_diff", ...}``;
``ratio`` is the ratio of per-step MEDIANS, 2 ranks / 1 rank, ``ratio_of_means`` beside it, and every step's seconds.
Target ``max_rel_param_diff`` <= 1e-5 (only float32 summation order differs).

    python benchmarks/pool_round.py [--steps 8] [--prompts-per-step 2] [--max-new-tokens 32]

About 9 minutes on 2 idle cores with the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TQDM_DISABLE", "1")

from ratchet.flows.settings import configure_prefect  # noqa: E402

STAGES = ("generate", "verify", "filter", "train")


def run_round(tmp: str, name: str, args, ranks: int) -> dict:
    """One GRPO round of ``args.steps`` steps on ``ranks`` CPU ranks; its step seconds, wall, candidate and base folders."""
    from ratchet.flows.rounds.campaign import improvement_round, preflight, prepare_campaign
    from ratchet.loop.campaign.round_context import load_ctx, read_marker, save_config
    from ratchet.loop.config import load_config
    from ratchet.store.db import query

    cfg = load_config(
        None,
        db=f"{tmp}/{name}.duckdb",
        campaign=name,
        algorithm="grpo",
        max_rounds=1,
        **{
            "compute.devices": ["cpu"] * ranks,
            "tasks.train_prompts_per_round": args.steps * args.prompts_per_step,
            "tasks.heldout_prompts": 8,
            "generation.group_size": 4,
            "generation.batch_size": 4,  # a step's 2 prompts x G = 4 are 2 batches: one per rank
            "generation.max_new_tokens": args.max_new_tokens,
            "grpo.steps_per_round": args.steps,
            "grpo.dynamic_sampling": False,  # every step trains on the same groups on both placements
            "grpo.mini_batch_size": args.prompts_per_step * 4,
            "grpo.micro_batch_size": 4,
            "preflight.pilot": False,
            "retention.enabled": False,
        },
    )
    preflight(cfg)
    path = save_config(cfg)
    prepare_campaign(str(path))
    t0 = time.perf_counter()
    improvement_round(str(path), 1)
    wall = time.perf_counter() - t0
    ctx = load_ctx(path, 1)
    steps = []
    for k in range(args.steps):
        markers = [read_marker(ctx.at_step(k).stage_dir(s)) for s in STAGES]
        steps.append(round(sum(m["wall_s"] for m in markers), 2))
    base = query(ctx.db, "SELECT base_checkpoint_id FROM campaigns")[1][0][0]
    paths = dict(query(ctx.db, "SELECT checkpoint_id, path FROM checkpoints")[1])
    cand = query(ctx.db, "SELECT output_checkpoint_id FROM training_runs ORDER BY step DESC LIMIT 1")[1][0][0]
    return {"steps": steps, "wall": wall, "candidate": paths[cand], "base": paths[base]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8, help="on-policy steps per round (grpo.steps_per_round)")
    ap.add_argument("--prompts-per-step", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    args = ap.parse_args()
    configure_prefect()
    from ratchet.loop.train.data_parallel import max_rel_param_diff

    with tempfile.TemporaryDirectory() as tmp:
        one = run_round(tmp, "one-rank", args, ranks=1)
        print(f"1 rank: {one['steps']} s per step, round {one['wall']:.0f} s", file=sys.stderr)
        two = run_round(tmp, "two-ranks", args, ranks=2)
        print(f"2 ranks: {two['steps']} s per step, round {two['wall']:.0f} s", file=sys.stderr)
        diff = max_rel_param_diff(two["candidate"], one["candidate"], one["base"])
    med_2, med_1 = statistics.median(two["steps"]), statistics.median(one["steps"])
    print(
        json.dumps(
            {
                "ranks": 2,
                "two_rank_s_per_step": round(med_2, 2),
                "one_rank_s_per_step": round(med_1, 2),
                "ratio": round(med_2 / med_1, 3),
                "ratio_of_means": round(statistics.mean(two["steps"]) / statistics.mean(one["steps"]), 3),
                "max_rel_param_diff": diff,
                "two_rank_step_s": two["steps"],
                "one_rank_step_s": one["steps"],
                "two_rank_round_wall_s": round(two["wall"], 1),
                "one_rank_round_wall_s": round(one["wall"], 1),
                "steps": args.steps,
                "sequences_per_step": args.prompts_per_step * 4,
                "max_new_tokens": args.max_new_tokens,
            }
        )
    )


if __name__ == "__main__":
    from ratchet.flows.daemon.run_server import run_api

    configure_prefect()
    with run_api():  # a locked Prefect server for this run (Prefect's ephemeral one is off)
        main()
