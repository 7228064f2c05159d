"""What the gate's held-out extras cost at the demo's shape: the confirmation set and the pass@k guard's samples.

Loads SmolLM2-135M-Instruct once on the transformers backend (the demo's engine, ``generation.batch_size``'s
default) and times, on the demo's own prompts as the demo renders them (``ratchet demo``'s config: its 400 gating
prompts and its 200-prompt confirmation slice, ``loop/tasks/demo.py``), at the demo's evaluation cap
(``generation.max_new_tokens_cap``):

- ``confirmation``: one greedy evaluation of the confirmation slice (what each promotion adds; ``--confirmation``);
- ``pass_at_k``: on ``--prompts`` gating prompts, the greedy evaluation against ``eval.num_samples = K`` sampled
  completions per prompt at ``eval.temperature`` for each K of ``--ks`` (what ``gate.pass_at_k = K`` adds to every
  evaluation of a checkpoint: the incumbent's and the candidate's).

Each job runs ``--repeats`` times, the jobs in a rotating order each repeat; the least disturbed pass (``min_s``)
is the figure on a shared machine, the median beside it (generation only: no verification, which is well under 1 s
per thousand completions). Prints progress lines and, as its LAST line, one JSON object::

    {"confirmation_prompts", "confirmation": {"min_s", "median_s", "passes_s", "completion_tokens"},
     "gating_prompts_demo", "gating_greedy_s_per_prompt",
     "pass_at_k": {"prompts", "greedy": {...}, "K=4": {..., "ratio_to_greedy" (of min_s)}, ...}, ...}

Run: ``.venv/bin/python benchmarks/gate_eval_cost.py --repeats 3`` (a few minutes on 2 quiet cores;
``--confirmation 20 --prompts 8 --ks 4`` is a quick check).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "2")  # the reference machines have 2 cores
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def passes(backend, jobs: dict, repeats: int) -> dict[str, dict]:
    """Time every job (``name: (chats, params)``) ``repeats`` times, the jobs in a rotating order each repeat (a
    neighbour's load hits all alike); per job its ``min_s`` (the least disturbed pass), ``median_s``, every pass's
    seconds and the completion tokens of one pass."""
    names, got = list(jobs), {name: {"s": [], "tokens": 0} for name in jobs}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            msgs, params = jobs[name]
            t = time.perf_counter()
            out = backend.generate(msgs, params)
            got[name]["s"].append(time.perf_counter() - t)
            got[name]["tokens"] = sum(len(c.token_ids) for c in out)
            print(
                f"{name}: {len(msgs)} prompts x {params.n} in {got[name]['s'][-1]:.1f} s ({got[name]['tokens']} tokens)",
                flush=True,
            )
    return {
        n: {"min_s": round(min(g["s"]), 2), "median_s": round(statistics.median(g["s"]), 2),
            "passes_s": [round(x, 2) for x in g["s"]], "completion_tokens": g["tokens"]}
        for n, g in got.items()
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--confirmation", type=int, default=None, help="confirmation prompts (default: the demo's 200)")
    ap.add_argument("--prompts", type=int, default=64, help="gating prompts of the pass@k measurement")
    ap.add_argument("--ks", default="4,8", help="comma-separated K (eval.num_samples) to time")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()

    from ratchet.loop.campaign.round_context import Ctx
    from ratchet.loop.checkpoints import resolve_model
    from ratchet.loop.config import load_config
    from ratchet.loop.generation.sampling import SamplingParams
    from ratchet.loop.generation.transformers_backend import TransformersBackend
    from ratchet.loop.tasks.demo import demo_overrides

    cfg = load_config(None, campaign="demo", max_rounds=3, **demo_overrides("arithmetic"))
    ctx = Ctx(cfg)
    gating = ctx.heldout()
    n_conf = args.confirmation or cfg.gate.confirmation_prompts
    conf = ctx.tasks.reserve(cfg, "heldout", n_conf, {p.prompt_id for p in gating}, "confirmation")
    cap = cfg.generation.max_new_tokens_cap
    t = time.perf_counter()
    backend = TransformersBackend(resolve_model(cfg.model.name_or_path), batch_size=cfg.generation.batch_size)
    print(f"transformers backend loaded in {time.perf_counter() - t:.1f} s (batch {cfg.generation.batch_size})", flush=True)
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=cap)
    backend.generate([ctx.messages(p) for p in gating[:4]], greedy)  # warm-up

    msgs = [ctx.messages(p) for p in gating[: args.prompts]]
    ks = [int(x) for x in args.ks.split(",") if x.strip()]
    jobs = {"confirmation": ([ctx.messages(p) for p in conf], greedy), "greedy": (msgs, greedy)}
    for k in ks:
        jobs[f"K={k}"] = (
            msgs,
            SamplingParams(n=k, temperature=cfg.eval.temperature, max_new_tokens=cap, seed=cfg.generation.seed),
        )
    got = passes(backend, jobs, args.repeats)
    g = got["greedy"]["min_s"]
    pass_k = {"prompts": len(msgs), "greedy": got["greedy"]}
    pass_k |= {f"K={k}": {**got[f"K={k}"], "ratio_to_greedy": round(got[f"K={k}"]["min_s"] / g, 2)} for k in ks}
    print(
        json.dumps(
            {
                "confirmation_prompts": len(conf),
                "confirmation": got["confirmation"],
                "gating_prompts_demo": len(gating),
                "gating_greedy_s_per_prompt": round(g / len(msgs), 4),
                "pass_at_k": pass_k,
                "max_new_tokens": cap,
                "batch_size": cfg.generation.batch_size,
                "temperature": cfg.eval.temperature,
                "repeats": args.repeats,
                "threads": int(os.environ["OMP_NUM_THREADS"]),
            }
        )
    )


if __name__ == "__main__":
    main()
