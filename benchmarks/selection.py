"""Prompt selection from the store (``tasks.selection = "frontier"``, + refill for GRPO) against ``uniform``.

Runs the demo campaign (``ratchet demo``'s arithmetic tasks, SmolLM2-135M-Instruct, transformers on CPU) for each
algorithm (rft, grpo) twice from the same base and seed: ``tasks.selection = "uniform"`` and ``"frontier"`` (GRPO
also with ``grpo.max_oversample``, DAPO's refill). Per round it records the held-out pass@1 of the candidate and of
the incumbent after the gate, the share of zero-variance groups, the generated tokens and the wall time.

Figures, per algorithm (frontier over uniform):

- ``gain_per_token_ratio``: (gain / generated tokens) of frontier over that of uniform; gain = best promoted held-out
  pass@1 minus the base's (0 when nothing was promoted); null when uniform gains nothing.
- ``tokens_to_match_ratio``: generated tokens frontier needed to reach uniform's last-round held-out pass@1 (the
  incumbent's, after the gate), over the tokens uniform needed for it; both read off the curve of (cumulative
  tokens, incumbent pass@1) interpolated linearly between rounds; null when uniform gains nothing or frontier never
  reaches it.

Generated tokens are every completion token a round sampled for training: rollouts, refills and rationalizations
(evaluation tokens are the same for both selections and are reported apart, ``eval_tokens``). The top-level
``algorithm`` names the algorithm with the larger gain_per_token_ratio, and its two ratios are repeated at the top.
Target (issue 28): tokens_to_match_ratio <= 0.75 or gain_per_token_ratio >= 1.3.

    python benchmarks/selection.py                       # the quoted configuration (see --help for the sizes)
    python benchmarks/selection.py --algorithms rft --rounds 2 --prompts 8 --heldout 16 --max-new-tokens 24   # smoke

Last line: one JSON object (keys above, plus ``runs`` with every round's figures and ``config``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

from ratchet.flows.settings import configure_prefect


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithms", default="rft,grpo", help="comma-separated: rft, grpo")
    ap.add_argument("--selections", default="uniform,frontier", help="comma-separated; both are needed for the ratios")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per campaign (the demo's 3)")
    ap.add_argument("--prompts", type=int, default=48, help="tasks.train_prompts_per_round (the demo's 48)")
    ap.add_argument(
        "--heldout",
        type=int,
        default=200,
        help="tasks.heldout_prompts (the demo has 400; the gate's bound needs ~180: `ratchet gate plan --eval-prompts 200`)",
    )
    ap.add_argument("--max-new-tokens", type=int, default=None, help="generation.max_new_tokens (default: the config's)")
    ap.add_argument("--group-size", type=int, default=None, help="generation.group_size (default: the config's 4)")
    ap.add_argument("--explore", type=float, default=0.1, help="tasks.selection_explore of the frontier runs")
    ap.add_argument("--refill", type=float, default=1.0, help="grpo.max_oversample of the frontier GRPO run")
    ap.add_argument("--model", default=None, help="model.name_or_path (default: the config's SmolLM2-135M-Instruct)")
    ap.add_argument("--seed", type=int, default=0, help="tasks.seed = generation.seed = sft.seed")
    ap.add_argument("--keep", default=None, help="folder to keep the stores and run dirs in (default: a temp dir)")
    ap.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="campaigns run at once, each in its own process with cores/jobs torch threads and its own Prefect home "
        "(1: one after another in this process)",
    )
    ap.add_argument("--only", default=None, help=argparse.SUPPRESS)  # internal: ALGORITHM:SELECTION, one campaign's JSON
    return ap.parse_args()


def _overrides(a: argparse.Namespace, algorithm: str, selection: str) -> dict:
    from ratchet.loop.tasks.demo import demo_overrides

    o = {
        **demo_overrides("arithmetic"),
        "tasks.heldout_prompts": a.heldout,
        "tasks.train_prompts_per_round": a.prompts,
        "tasks.selection": selection,
        "tasks.seed": a.seed,
        "generation.seed": a.seed,
        "sft.seed": a.seed,
    }
    if selection == "frontier":
        o["tasks.selection_explore"] = a.explore
        if algorithm == "grpo":
            o["grpo.max_oversample"] = a.refill
    if a.max_new_tokens:
        o["generation.max_new_tokens"] = a.max_new_tokens
    if a.group_size:
        o["generation.group_size"] = a.group_size
    if a.model:
        o["model.name_or_path"] = a.model
    return o


def run_one(a: argparse.Namespace, tmp: str, algorithm: str, selection: str) -> dict:
    """One campaign: every round's figures, from its own store (same base and seed as the others)."""
    from ratchet.flows.rounds.campaign import preflight, run_campaign
    from ratchet.loop.campaign.round_context import save_config
    from ratchet.loop.config import load_config

    name = f"sel-{algorithm}-{selection}"
    cfg = load_config(
        None,
        db=f"{tmp}/{name}.duckdb",
        run_dir=f"{tmp}/{name}.runs",
        campaign=name,
        algorithm=algorithm,
        max_rounds=a.rounds,
        **_overrides(a, algorithm, selection),
    )
    preflight(cfg)
    path = save_config(cfg)
    t0 = time.perf_counter()
    run_campaign(path)
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 1), **campaign_figures(cfg.db, name)}


def campaign_figures(db: str, name: str) -> dict:
    """Base pass@1 and per round: candidate / incumbent pass@1, decision, tokens, zero-variance share, wall seconds."""
    from ratchet.flows.report.picks import selection_rows
    from ratchet.store.db import connect
    from ratchet.store.read.reports import campaign_table

    with connect(db, read_only=True) as con:
        base, rows = campaign_table(con, name)
        sel = {r["round_index"]: r for r in selection_rows(con, name)}
        tokens = dict(
            con.execute(
                """SELECT r.round_index, sum(t.completion_tokens) FROM trajectories t JOIN rounds r USING (round_id)
                   JOIN campaigns c USING (campaign_id) WHERE c.name = ? AND t.purpose IN ('rollout', 'rationalization')
                   GROUP BY 1""",
                [name],
            ).fetchall()
        )
        eval_tokens = con.execute(
            """SELECT coalesce(sum(t.completion_tokens), 0) FROM trajectories t JOIN rounds r USING (round_id)
               JOIN campaigns c USING (campaign_id) WHERE c.name = ? AND t.eval_set_id IS NOT NULL""",
            [name],
        ).fetchone()[0]
    incumbent = base
    out = []
    for r in rows:
        if r["decision"] == "promote" and r["candidate_pass1"] is not None:
            incumbent = max(incumbent, r["candidate_pass1"]) if incumbent is not None else r["candidate_pass1"]
        s = sel.get(r["round_index"], {})
        wall = (r["finished_at"] - r["started_at"]).total_seconds() if r["finished_at"] and r["started_at"] else None
        out.append(
            {
                "round": r["round_index"],
                "decision": r["decision"],
                "candidate_pass1": r["candidate_pass1"],
                "incumbent_pass1": incumbent,
                "generated_tokens": int(tokens.get(r["round_index"], 0)),
                "zero_variance_share": s.get("zero_variance_share"),
                "zero_variance_tokens": s.get("zero_variance_tokens"),
                "refilled": s.get("refilled"),
                "wall_s": None if wall is None else round(wall, 1),
            }
        )
    return {"base_pass1": base, "rounds": out, "eval_tokens": int(eval_tokens)}


def gain(run: dict) -> float:
    """Best promoted held-out pass@1 minus the base's (0: nothing promoted)."""
    best = max([r["incumbent_pass1"] for r in run["rounds"] if r["incumbent_pass1"] is not None] or [run["base_pass1"]])
    return max(best - run["base_pass1"], 0.0)


def tokens_to_reach(run: dict, target: float) -> float | None:
    """Generated tokens at which the incumbent's pass@1 first reaches ``target`` (linear between rounds); None: never."""
    prev_t, prev_p, total = 0.0, run["base_pass1"], 0.0
    if prev_p >= target:
        return 0.0
    for r in run["rounds"]:
        total += r["generated_tokens"]
        p = r["incumbent_pass1"]
        if p is not None and p >= target:
            return prev_t + (total - prev_t) * ((target - prev_p) / (p - prev_p) if p > prev_p else 1.0)
        prev_t, prev_p = total, p if p is not None else prev_p
    return None


def ratios(uniform: dict, frontier: dict) -> dict:
    """``gain_per_token_ratio`` and ``tokens_to_match_ratio`` (module docstring) of frontier over uniform."""
    tok_u = sum(r["generated_tokens"] for r in uniform["rounds"])
    tok_f = sum(r["generated_tokens"] for r in frontier["rounds"])
    g_u, g_f = gain(uniform), gain(frontier)
    gpt = None if g_u <= 0 or not tok_u or not tok_f else (g_f / tok_f) / (g_u / tok_u)
    match = None
    if g_u > 0:
        target = uniform["rounds"][-1]["incumbent_pass1"]
        need_u, need_f = tokens_to_reach(uniform, target), tokens_to_reach(frontier, target)
        match = None if need_f is None or not need_u else need_f / need_u
    return {
        "gain_uniform": round(g_u, 4),
        "gain_frontier": round(g_f, 4),
        "gain_per_token_ratio": None if gpt is None else round(gpt, 3),
        "tokens_to_match_ratio": None if match is None else round(match, 3),
    }


def run_in_subprocess(a: argparse.Namespace, tmp: str, algorithm: str, selection: str, threads: int) -> dict:
    """``run_one`` in a child process of its own (``--only``), with ``threads`` torch threads and its own Prefect home
    (two ephemeral Prefect servers must not share one SQLite database)."""
    import os
    import subprocess

    argv = [sys.executable, __file__, "--only", f"{algorithm}:{selection}", "--keep", tmp, "--jobs", "1"]
    for k in ("rounds", "prompts", "heldout", "max_new_tokens", "group_size", "explore", "refill", "model", "seed"):
        v = getattr(a, k)
        if v is not None:
            argv += [f"--{k.replace('_', '-')}", str(v)]
    env = {
        **os.environ,
        "PREFECT_HOME": f"{tmp}/{algorithm}-{selection}.prefect",
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
    }
    log = f"{tmp}/{algorithm}-{selection}.log"
    with open(log, "w") as err:
        out = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=err, text=True, check=False)
    if out.returncode != 0:
        tail = open(log).read()[-3000:]
        raise SystemExit(f"{algorithm} / {selection} failed (exit {out.returncode}); the end of {log}:\n{tail}")
    return json.loads(out.stdout.strip().splitlines()[-1])


_NO_RATIOS = {"gain_per_token_ratio": None, "tokens_to_match_ratio": None}  # one selection run: nothing to compare


def main() -> None:
    a = _args()
    configure_prefect()
    algorithms = [x.strip() for x in a.algorithms.split(",") if x.strip()]
    bad = [x for x in algorithms if x not in ("rft", "grpo")]
    if bad:
        sys.exit(f"--algorithms {a.algorithms!r}: {bad} not one of rft, grpo")
    if a.only:  # one campaign, for the parent's --jobs
        alg, sel = a.only.split(":")
        print(json.dumps(run_one(a, a.keep, alg, sel), default=str))
        return
    runs: dict[str, dict] = {}
    pairs = [
        (alg, sel)
        for alg in algorithms
        for sel in [x.strip() for x in a.selections.split(",") if x.strip() in ("uniform", "frontier")]
    ]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        tmp = a.keep or scratch
        if a.jobs <= 1:
            for alg, sel in pairs:
                print(f"{alg} / {sel} ...", file=sys.stderr)
                runs.setdefault(alg, {})[sel] = run_one(a, tmp, alg, sel)
        else:
            import os
            from concurrent.futures import ThreadPoolExecutor

            threads = max(1, (os.cpu_count() or 1) // a.jobs)
            with ThreadPoolExecutor(a.jobs) as pool:
                futures = {p: pool.submit(run_in_subprocess, a, tmp, *p, threads) for p in pairs}
                for (alg, sel), f in futures.items():
                    runs.setdefault(alg, {})[sel] = f.result()
                    print(f"{alg} / {sel} done at {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    per_alg = {alg: ratios(r["uniform"], r["frontier"]) if len(r) == 2 else _NO_RATIOS for alg, r in runs.items()}
    best = max(per_alg, key=lambda k: (per_alg[k]["gain_per_token_ratio"] is not None, per_alg[k]["gain_per_token_ratio"] or 0))
    doc = {
        "algorithm": best,
        "gain_per_token_ratio": per_alg[best]["gain_per_token_ratio"],
        "tokens_to_match_ratio": per_alg[best]["tokens_to_match_ratio"],
        **per_alg,
        "runs": runs,
        "wall_s": round(time.perf_counter() - t0, 1),
        "config": {k: v for k, v in vars(a).items() if k not in ("keep", "only")},
    }
    print(json.dumps(doc, default=str))


if __name__ == "__main__":
    from ratchet.flows.daemon.run_server import run_api

    configure_prefect()
    with run_api():  # a locked Prefect server for this run (Prefect's ephemeral one is off)
        main()
