"""Error rates of the gate's rule, from the real ``ratchet.loop.gate.decide`` on simulated paired outcomes.

1. Promote rate of one round for true pass@1 changes -0.10 .. +0.10 at 48 / 200 / 1000 held-out prompts
   (incumbent pass@1 0.5, the two checkpoints disagree on 20% of prompts; ``ratchet.loop.gate.error_rates``).
   Targets for the default ``[gate]``: -5 points promoted <= 5% at every size, +5 points >= 80% at 1000.
2. A 100-round campaign at 200 prompts in which every candidate is truly 1 point worse than its incumbent
   (``gate_plan.simulate_campaign``; a halt ends it where it stands). Target: the final incumbent is at most
   ``margin`` below the base with probability >= 1 - alpha.

3. The sequential rule (``gate.sequential = true``, ``ratchet.loop.gate.sequential.run_sequential``): promote rate
   and mean prompts used for true changes -5 / -3 / 0 / +5 / +10 points, up to ``max_eval_prompts`` = 1000 in
   batches of 100 (``gate_plan.sequential_rates``).

The old rule (``rule = "no_detected_drop"``, McNemar) is measured beside the default for comparison.

    python benchmarks/gate_error_rates.py [--trials 1000] [--campaigns 400] [--sequential-trials 400]

Prints one JSON object (~3-4 min on one core at the defaults).
"""

from __future__ import annotations

import argparse
import json
import time

from ratchet.loop.config import GateConfig
from ratchet.loop.gate.error_rates import promote_rate, sequential_rates, simulate_campaign

DELTAS = (-0.10, -0.05, -0.03, 0.0, 0.03, 0.05, 0.10)
SIZES = (48, 200, 1000)


def rates(cfg: GateConfig, trials: int) -> dict:
    return {
        str(n): {f"{d:+.2f}": promote_rate(cfg, n, d, trials, seed=1000 * n + i) for i, d in enumerate(DELTAS)} for n in SIZES
    }


def campaigns(cfg: GateConfig, runs: int) -> dict:
    res = [simulate_campaign(cfg, 100, 200, delta=-0.01, seed=s) for s in range(runs)]
    held = sum(r["final_true_drop"] <= cfg.margin + 1e-9 for r in res) / runs
    return {
        "runs": runs,
        "p_final_within_margin_of_base": held,
        "mean_promotions": sum(r["promotions"] for r in res) / runs,
        "max_final_true_drop": round(max(r["final_true_drop"] for r in res), 4),
        "halted_share": sum(r["halted"] for r in res) / runs,
        "mean_rounds_run": sum(r["rounds_run"] for r in res) / runs,
    }


def sequential(trials: int) -> dict:
    cfg = GateConfig(sequential=True, max_eval_prompts=1000, sequential_batch_prompts=100)
    out = {}
    for i, d in enumerate((-0.05, -0.03, 0.0, 0.05, 0.10)):
        rate, used = sequential_rates(cfg, d, trials, seed=7000 + i)
        out[f"{d:+.2f}"] = {"promote_rate": rate, "mean_prompts_used": round(used, 1)}
    return {"gate": {k: cfg.model_dump()[k] for k in ("max_eval_prompts", "sequential_batch_prompts", "margin", "alpha")},
            "trials": trials, "by_true_change": out}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000, help="simulated rounds per (size, delta)")
    ap.add_argument("--campaigns", type=int, default=400, help="simulated 100-round campaigns")
    ap.add_argument("--sequential-trials", type=int, default=400, help="simulated rounds per change, sequential rule")
    args = ap.parse_args()
    t0 = time.perf_counter()
    default = GateConfig()
    legacy = GateConfig(rule="no_detected_drop", test="mcnemar")
    r = rates(default, args.trials)
    out = {
        "default_gate": default.model_dump(),
        "discordance": 0.2,
        "incumbent_pass1": 0.5,
        "trials": args.trials,
        "promote_rate": r,
        "targets": {
            "minus5_promoted_le_5pct_at_all_sizes": all(r[str(n)]["-0.05"] <= 0.05 for n in SIZES),
            "plus5_promoted_ge_80pct_at_1000": r["1000"]["+0.05"] >= 0.8,
        },
        "campaign_100_rounds_200_prompts_each_1pt_worse": campaigns(default, args.campaigns),
        # without halts (max_consecutive_rejections never reached): repeated tries against the best ever promoted
        "campaign_without_halts": campaigns(
            default.model_copy(update={"max_consecutive_rejections": 10**6}), args.campaigns // 4
        ),
        "old_rule": {
            "gate": legacy.model_dump(),
            "promote_rate": rates(legacy, args.trials // 2),
            "campaign_100_rounds_200_prompts_each_1pt_worse": campaigns(legacy, args.campaigns),
        },
    }
    out["sequential"] = sequential(args.sequential_trials)
    c = out["campaign_100_rounds_200_prompts_each_1pt_worse"]
    out["targets"]["campaign_within_margin_ge_1_minus_alpha"] = c["p_final_within_margin_of_base"] >= 1 - default.alpha
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
