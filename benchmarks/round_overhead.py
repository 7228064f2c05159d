"""How much of a round's wall time is orchestration and store work rather than model/verifier compute.

Runs one real improvement round (SmolLM2-135M-Instruct, transformers on CPU, Prefect flow, DuckDB
file) and splits its wall time: compute = seconds inside generate / verify / train / evaluate model
and verifier calls (measured by each stage); overhead = everything else (Prefect task runs, Parquet
writes, DuckDB ingest and queries, markers). Target: overhead_fraction <= 0.05.

    python benchmarks/round_overhead.py [--prompts 16]

Last line: JSON ``{"overhead_fraction", "round_wall_s", "compute_s", "stage_compute_s": {...}}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

from ratchet.flows.settings import configure_prefect  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=16, help="train prompts (and held-out prompts) in the round")
    args = ap.parse_args()
    configure_prefect()
    from ratchet.flows.rounds.campaign import improvement_round, preflight, prepare_campaign
    from ratchet.loop.campaign.round_context import load_ctx, read_marker, save_config
    from ratchet.loop.config import load_config

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(
            None,
            db=f"{tmp}/bench.duckdb",
            campaign="bench",
            max_rounds=1,
            **{"tasks.train_prompts_per_round": args.prompts, "tasks.heldout_prompts": args.prompts},
        )
        preflight(cfg)
        path = save_config(cfg)
        prepare_campaign(str(path))
        t0 = time.perf_counter()
        improvement_round(str(path), 1)
        wall = time.perf_counter() - t0
        ctx = load_ctx(path, 1)
        stages: dict[str, float] = {}
        for d in sorted(ctx.stage_dir("x").parent.iterdir()):
            m = read_marker(d)
            if m:
                key = "evaluate" if d.name.startswith("evaluate") else d.name
                stages[key] = stages.get(key, 0.0) + m["compute_s"]
    compute = sum(stages.values())
    print(f"round wall {wall:.1f} s, compute {compute:.1f} s", file=sys.stderr)
    print(
        json.dumps(
            {
                "overhead_fraction": round((wall - compute) / wall, 4),
                "round_wall_s": round(wall, 2),
                "compute_s": round(compute, 2),
                "stage_compute_s": {k: round(v, 2) for k, v in stages.items()},
            }
        )
    )


if __name__ == "__main__":
    from ratchet.flows.daemon.run_server import run_api

    configure_prefect()
    with run_api():  # a locked Prefect server for this run (Prefect's ephemeral one is off)
        main()
