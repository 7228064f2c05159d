"""The rationalize stage of an rft round (``sft.rationalization``; STaR, Zelikman et al. 2022, s3.3).

After verification, the round's math prompts that none of their G rollouts solved get G more rollouts from the same
policy with the gold answer as a hint (``ratchet.loop.tasks.rationalization.hinted``). They are stored as
trajectories of purpose ``rationalization`` whose ``prompt_messages`` is the hinted chat the engine was given, and
verified like rollouts. The filter stage trains on the verified-correct ones under the *unhinted* prompt
(``rationalized_examples``), with ``training_examples.origin = 'rationalization'``.
"""

from __future__ import annotations

import pyarrow.parquet as pq
from prefect import task
from prefect.cache_policies import NONE

from ratchet.common.seeds import derive_seed
from ratchet.flows.compute.engine import RoundEngine
from ratchet.flows.compute.resolve import rollout_cap
from ratchet.flows.rounds.stages.frame import stage_frame
from ratchet.flows.rounds.stages.pipeline import trajectory_rows, verdict_rows
from ratchet.flows.rounds.stages.rationale_data import PURPOSE
from ratchet.flows.rounds.stages.round_engine import sample
from ratchet.loop.generation.sampling import SamplingParams
from ratchet.loop.tasks.rationalization import hinted, unsolved
from ratchet.loop.tasks.sources import Prompt
from ratchet.store.ingest import write_parquet


@task(name="rationalize", cache_policy=NONE)
def rationalize(config_path: str, round_index: int, policy: str, engine: RoundEngine) -> str:
    """Hinted rollouts of the round's unsolved prompts from ``policy`` on the round's engine, verified; ingests both.
    Returns the file."""
    with stage_frame(config_path, round_index, "rationalize") as s:
        ctx, out = s.ctx, s.out
        files = [out / "part-0.parquet", out / "verdicts.parquet"]
        s.ingest("trajectories", files[0])
        s.ingest("verdicts", files[1])
        if not s.done:
            gen, ver = ctx.stage_dir("generate"), ctx.stage_dir("verify")
            prompts = [Prompt(**p) for p in pq.read_table(gen / "prompts.parquet").to_pylist()]
            trajs = {t["trajectory_id"]: t["prompt_id"] for t in pq.read_table(gen / "part-0.parquet").to_pylist()}
            solved = {trajs[v["trajectory_id"]] for v in pq.read_table(ver / "part-0.parquet").to_pylist() if v["correct"]}
            todo = unsolved(prompts, solved)
            rows: list[dict] = []
            g = ctx.cfg.generation
            for G, subset in sorted(ctx.tasks.group_sizes(todo, g.group_size).items()):
                params = SamplingParams(
                    n=G,
                    temperature=ctx.cfg.rollout_temperature,
                    top_p=g.top_p,
                    max_new_tokens=rollout_cap(ctx),
                    seed=derive_seed("rationalization", g.seed, round_index),
                    stop=g.stop,
                )
                chats = [hinted(ctx.messages(p), p.answer) for p in subset]
                desc = f"round {round_index}: rationalization" + (f", G={G}" if G != g.group_size else "")
                with s.timer.compute():
                    got = sample(ctx, engine, policy, chats, params, desc)
                rows += trajectory_rows(ctx, subset, got, policy, PURPOSE, params, g.backend, chats=chats)
            with s.timer.compute():
                verdicts = verdict_rows(ctx, rows, {p.prompt_id: p.__dict__ for p in todo})
            write_parquet(rows, files[0], "trajectories")
            write_parquet(verdicts, files[1], "verdicts")
            correct = sum(v["correct"] for v in verdicts)
            tokens = sum(r["completion_tokens"] for r in rows)
            s.finish({"prompts": len(todo), "n": len(rows), "correct": correct, "tokens": tokens})
            s.log.info(
                "rationalization: %d unsolved prompts, %d hinted rollouts, %d verified correct", len(todo), len(rows), correct
            )
    return str(files[0])
