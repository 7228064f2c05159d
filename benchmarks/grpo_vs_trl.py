"""Ratchet's GRPO steps vs TRL's ``GRPOTrainer``: same model, prompts, G, max length, optimizer and steps.

A step is one on-policy iteration in both: generate G completions for each of ``--prompts-per-step``
prompts from the current policy, score them with Ratchet's verifier, one optimizer step. Ratchet's
step is what a round's ``grpo.steps_per_round`` iteration does (transformers backend from the
checkpoint, ``score_batch``, ``train_grpo`` from that checkpoint with the optimizer state carried,
checkpoint saved); TRL keeps its model in memory. Both use GRPO advantages (std-scaled), the
``grpo`` loss (seq-mean-token-mean), eps 0.2, beta 0, AdamW (0.9, 0.99) at a constant LR, grad-norm
clip 1.0, temperature 0.8, completions cut at ``--max-new-tokens`` masked, and keep zero-variance
groups (TRL has no dynamic sampling). Each side runs in its own child process (peak RSS is that
child's); both are loaded at once and take turns in blocks of ``--block`` steps (ours, TRL, ours, ...), so a
load spike on a shared machine hits both sides alike rather than one whole side. Held-out pass@1 (greedy, the
demo's held-out prompts, Ratchet's verifier) is measured on both final policies by the same code, one side
after the other once all steps are done. Ours trains on the sampled token ids with the sampler's log-probs
(``train/sampler/*`` metrics; the engine is the learner's module, so no correction).

Prints progress and, as its LAST line, a JSON object with ``ratio`` (the ratio of per-step MEDIANS, ours / TRL;
target <= 0.5: a median is not moved by one step that a load spike stretched), ``ratio_of_means`` beside it,
``ours_s_per_step`` / ``trl_s_per_step`` (medians), ``ours_mean_s`` / ``trl_mean_s``, each side's spread
(``ours_p25_p75_s``, ``trl_p25_p75_s``, ``ours_min_max_s``, ``trl_min_max_s``) and step times, ``ours_peak_mb``,
``trl_peak_mb``, ``ours_heldout_pass1``, ``trl_heldout_pass1`` (target: ours >= TRL's), the base model's
``base_heldout_pass1`` and ours' last step's sampler/trainer gap (``ours_sampler_logp_diff_mean`` / ``_max``).

By default Ratchet's side runs as a round does: the round engine (``ratchet.flows.compute.engine.LocalEngine``,
one rank process) keeps the engine and a ``GRPOLearner`` loaded for all steps, each pass's weights go
into the engine in place and only the final policy is saved (target ratio <= 0.5). ``--per-step``: a new
engine and trainer per step and a checkpoint per step (what a round does with the persistent path off).

Run: ``.venv/bin/python benchmarks/grpo_vs_trl.py [--steps 16] [--per-step]`` (about 15 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
ROOT = Path(__file__).resolve().parents[1]

from grpo_parity import grpo_samples, ratchet_grpo, step_clock, trl_grpo_args  # noqa: E402 - after the environment


class Turns:
    """A child's side of the block schedule: ``ready`` once loaded, then ``wait(k)`` before block k (and before the
    held-out evaluation) and ``done(k)`` after it, through files in ``--out`` the parent creates and watches."""

    def __init__(self, args, side: str) -> None:
        self.dir, self.side, self.block = Path(args.out), side, max(args.block, 1)

    def ready(self) -> None:
        (self.dir / f"ready-{self.side}").touch()

    def wait(self, k) -> None:
        while not (self.dir / f"go-{self.side}-{k}").exists():
            time.sleep(0.05)

    def done(self, k) -> None:
        (self.dir / f"done-{self.side}-{k}").touch()

    def before_step(self, step: int) -> None:
        if step % self.block == 0:
            self.wait(step // self.block)

    def after_step(self, step: int, steps: int) -> None:
        if step % self.block == self.block - 1 or step == steps - 1:
            self.done(step // self.block)


def _setup(args):
    """Model dir, train prompts (one chunk per step), held-out prompts and the chat renderer, as the demo builds them."""
    from ratchet.loop.checkpoints import resolve_model
    from ratchet.loop.config import RatchetConfig
    from ratchet.loop.tasks.sources import chat_messages, make_task_source

    cfg = RatchetConfig()
    t = cfg.tasks
    src = make_task_source(t.source, levels=t.levels, heldout_fraction=t.heldout_fraction)
    shots = src.fewshot(t.fewshot)
    train = src.draw(args.steps * args.prompts_per_step, "train", seed=args.seed)
    heldout = src.draw(args.heldout or t.heldout_prompts, "heldout", seed=t.seed)
    return resolve_model(cfg.model.name_or_path), train, heldout, lambda q: chat_messages(t.system_prompt, shots, q), cfg


def _rewards(completions: list[str], golds: list[str], cfg) -> list[float]:
    from ratchet.verifiers.reward import score_batch

    v = cfg.verifier
    return [
        float(x.reward)
        for x in score_batch(
            completions,
            golds,
            kind="math",
            format_template=v.format_template,
            format_weight=v.format_weight,
            timeout_s=v.timeout_s,
        )
    ]


def heldout_pass1(model_dir: str | Path, heldout, render, cfg) -> float:
    """Greedy held-out pass@1 with Ratchet's backend and verifier (the gate's metric)."""
    from ratchet.loop.generation.sampling import SamplingParams
    from ratchet.loop.generation.transformers_backend import TransformersBackend
    from ratchet.verifiers.reward import score_batch

    b = TransformersBackend(model_dir, batch_size=cfg.generation.batch_size)
    comps = b.generate(
        [render(p.question) for p in heldout], SamplingParams(n=1, temperature=0.0, max_new_tokens=cfg.generation.max_new_tokens)
    )
    b.close()
    v = score_batch(
        [c.text for c in comps], [p.answer for p in heldout], kind="math", format_template=cfg.verifier.format_template
    )
    return sum(x.correct for x in v) / len(v)


def _samples(comps, prompts, render, cfg) -> list:
    """Scored GRPO samples of one step's completions (the same for the per-step and the persistent mode)."""
    rewards = _rewards([c.text for c in comps], [prompts[c.prompt_index].answer for c in comps], cfg)
    return grpo_samples(comps, [render(p.question) for p in prompts], rewards)


def run_ours(args, out: Path) -> dict:
    from ratchet.loop.generation.sampling import SamplingParams
    from ratchet.loop.generation.transformers_backend import TransformersBackend
    from ratchet.loop.train.grpo import GRPORun, train_grpo

    base, train, heldout, render, cfg = _setup(args)
    st = ratchet_grpo(args.lr, args.prompts_per_step * args.group_size, mask_truncated=True)
    run = GRPORun(temperature=0.8, max_completion_length=args.max_new_tokens, seed=args.seed)
    if not args.per_step:
        return _run_ours_persistent(args, out, st, run)
    policy, times, turns = base, [], Turns(args, "ours")
    turns.ready()
    for step in range(args.steps):
        turns.before_step(step)
        t0 = time.perf_counter()
        prompts = train[step * args.prompts_per_step : (step + 1) * args.prompts_per_step]
        b = TransformersBackend(policy, batch_size=cfg.generation.batch_size)
        comps = b.generate(
            [render(p.question) for p in prompts],
            SamplingParams(
                n=args.group_size, temperature=0.8, max_new_tokens=args.max_new_tokens, seed=args.seed + step, logprobs=True
            ),
        )
        b.close()
        t_gen = time.perf_counter() - t0
        samples = _samples(comps, prompts, render, cfg)
        step_run = dataclasses.replace(run, measure_kl=step == args.steps - 1)
        res = train_grpo(policy, samples, out / f"step-{step}", st, step_run, ref_dir=base, optimizer_state=out / "optimizer.pt")
        if res.checkpoint_dir is not None:
            policy = res.checkpoint_dir
        times.append(time.perf_counter() - t0)
        print(
            f"ours step {step}: {times[-1]:.1f} s (generation {t_gen:.1f} s, train pass {res.seconds:.1f} s), "
            f"reward mean {sum(s.reward for s in samples) / len(samples):.3f}",
            flush=True,
        )
        turns.after_step(step, args.steps)
        gap = {k: v for k, v in res.metrics.items() if k.startswith("train/sampler/logp_diff")}
    turns.wait("eval")
    return {"step_s": times, "gap": gap, "heldout_pass1": heldout_pass1(policy, heldout, render, cfg)}


def _run_ours_persistent(args, out: Path, st, run) -> dict:
    """Ratchet's steps as a round runs them: the round engine's one rank process holds the engine and a
    ``GRPOLearner``; after each pass the learner's weights go into the running engine in place; only the final
    policy is saved (one checkpoint). Worker start and model load count in the first step."""
    import logging

    from ratchet.flows.compute.engine import LocalEngine, Placement
    from ratchet.flows.compute.messages import GRPOStep, StartLearner, engine_spec
    from ratchet.loop.config import ComputeConfig
    from ratchet.loop.generation.sampling import SamplingParams

    base, train, heldout, render, cfg = _setup(args)
    log = logging.getLogger("grpo_vs_trl")
    compute = ComputeConfig(device_slots=False, cpu_threads_per_worker=int(os.environ["OMP_NUM_THREADS"]))
    times, t0, turns = [], time.perf_counter(), Turns(args, "ours")
    spec = engine_spec(base, cfg.generation, "float32")
    with LocalEngine(spec, Placement((("cpu",),)), gen=cfg.generation, compute=compute, log=log) as w:
        w.start(StartLearner(str(base), st.model_dump(mode="json"), "float32", str(base)))
        load_s = time.perf_counter() - t0  # once per round; TRL's model load is not timed either
        print(f"ours (persistent): worker started, engine and learner loaded in {load_s:.1f} s", flush=True)
        turns.ready()
        for step in range(args.steps):
            turns.before_step(step)
            t0 = time.perf_counter()
            prompts = train[step * args.prompts_per_step : (step + 1) * args.prompts_per_step]
            comps = w.generate(
                [render(p.question) for p in prompts],
                SamplingParams(
                    n=args.group_size, temperature=0.8, max_new_tokens=args.max_new_tokens, seed=args.seed + step, logprobs=True
                ),
            )
            t_gen = time.perf_counter() - t0
            samples = _samples(comps, prompts, render, cfg)
            last = step == args.steps - 1  # as a round: at beta = 0 the KL guard's reference pass on the last step only
            t1 = time.perf_counter()
            res = w.train_step(GRPOStep(samples, dataclasses.replace(run, measure_kl=last)))  # weights reach the engine in place
            times.append(time.perf_counter() - t0)
            print(
                f"ours (persistent) step {step}: {times[-1]:.1f} s (generation {t_gen:.1f} s, train pass "
                f"{time.perf_counter() - t1:.1f} s), reward mean {sum(s.reward for s in samples) / len(samples):.3f}",
                flush=True,
            )
            turns.after_step(step, args.steps)
        gap = {k: v for k, v in res["metrics"].items() if k.startswith("train/sampler/logp_diff")}
        w.save(out / "ours-final")
    turns.wait("eval")
    return {
        "step_s": times,
        "gap": gap,
        "load_s": load_s,
        "heldout_pass1": heldout_pass1(out / "ours-final", heldout, render, cfg),
    }


def run_trl(args, out: Path) -> dict:
    from datasets import Dataset
    from trl import GRPOTrainer

    base, train, heldout, render, cfg = _setup(args)
    ds = Dataset.from_list([{"prompt": render(p.question), "answer": p.answer} for p in train])

    def reward(prompts, completions, answer, **_):
        return _rewards([c[-1]["content"] if isinstance(c, list) else c for c in completions], list(answer), cfg)

    times: list[float] = []
    turns = Turns(args, "trl")
    clock = step_clock(times, before=turns.before_step, after=lambda k: turns.after_step(k, args.steps), ready=turns.ready)
    targs = trl_grpo_args(
        out / "trl",
        prompts_per_step=args.prompts_per_step,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        lr=args.lr,
        steps=args.steps,
        seed=args.seed,
        mask_truncated=True,
        gradient_checkpointing=True,  # TRL's GRPOConfig default, kept as this benchmark always ran it (ours: off)
        cpu=True,
        bf16=False,
    )
    trainer = GRPOTrainer(model=str(base), reward_funcs=reward, args=targs, train_dataset=ds, callbacks=[clock])
    trainer.train()
    final = out / "trl-final"
    trainer.model.save_pretrained(final)
    trainer.processing_class.save_pretrained(final)
    turns.wait("eval")
    return {"step_s": times, "heldout_pass1": heldout_pass1(final, heldout, render, cfg)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompts-per-step", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--heldout", type=int, default=0, help="held-out prompts evaluated (0: the demo's tasks.heldout_prompts)")
    ap.add_argument("--block", type=int, default=2, help="steps per turn: the sides alternate in blocks of this many steps")
    ap.add_argument(
        "--per-step",
        action="store_true",
        help="ours loads a new engine and trainer each step and saves a checkpoint per step (the per-step round); "
        "default: the engine and the learner stay loaded, weights updated in place, one checkpoint",
    )
    ap.add_argument("--side", choices=["ours", "trl", "base"], help=argparse.SUPPRESS)  # internal: the child's job
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        out = Path(args.out)
        if args.side == "base":
            base, _, heldout, render, cfg = _setup(args)
            res = {"heldout_pass1": heldout_pass1(base, heldout, render, cfg)}
        else:
            res = (run_ours if args.side == "ours" else run_trl)(args, out)
        # this process or its largest child (the persistent side's rollout worker holds the models)
        peak_kb = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
        res["peak_mb"] = peak_kb / 1024
        print("RESULT " + json.dumps(res), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="grpo-bench-") as tmp:
        results = {"base": _run_children(args, Path(tmp), ["base"], 0)["base"]}
        results.update(_run_children(args, Path(tmp), ["ours", "trl"], -(-args.steps // max(args.block, 1))))
    print(json.dumps(summary(args, results)))


def _run_children(args, tmp: Path, sides: list[str], blocks: int) -> dict:
    """Start one child per side, let them take turns block by block (then evaluate one at a time), return results."""
    procs, logs = {}, {}
    for side in sides:
        cmd = (
            [sys.executable, __file__, "--side", side, "--out", str(tmp)]
            + [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("side", "out", "per_step")]
            + (["--per-step"] if args.per_step else [])
        )
        logs[side] = open(tmp / f"{side}.log", "w+")  # noqa: SIM115 - closed below
        procs[side] = subprocess.Popen(cmd, stdout=logs[side], stderr=subprocess.STDOUT, text=True)

    def wait_for(path: Path) -> None:
        while not path.exists():
            for side, p in procs.items():
                if p.poll() is not None and p.returncode != 0:
                    logs[side].seek(0)
                    sys.exit(f"{side} side failed (exit {p.returncode}):\n{logs[side].read()[-4000:]}")
            time.sleep(0.05)

    if blocks:
        for side in sides:
            wait_for(tmp / f"ready-{side}")
        for k in range(blocks):  # alternate: ours block k, then TRL block k
            for side in sides:
                (tmp / f"go-{side}-{k}").touch()
                wait_for(tmp / f"done-{side}-{k}")
        for side in sides:  # held-out evaluations one at a time, after every timed step
            (tmp / f"go-{side}-eval").touch()
            procs[side].wait()
    results = {}
    for side, p in procs.items():
        p.wait()
        logs[side].seek(0)
        lines = logs[side].read().splitlines()
        logs[side].close()
        for line in lines:
            if not line.startswith("RESULT "):
                print(f"[{side}] {line}", flush=True)
        if p.returncode != 0:
            sys.exit(f"{side} side failed (exit {p.returncode})")
        results[side] = json.loads(next(line for line in lines if line.startswith("RESULT "))[7:])
    return results


def summary(args, results: dict) -> dict:
    """The benchmark's JSON: medians, means and spreads of each side's step times, and the quality figures."""
    ours, trl = results["ours"], results["trl"]

    def spread(xs: list[float]) -> dict:
        q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
        return {
            "median": statistics.median(xs),
            "mean": statistics.fmean(xs),
            "p25_p75": [q[0], q[2]],
            "min_max": [min(xs), max(xs)],
        }

    o, t = spread(ours["step_s"]), spread(trl["step_s"])
    r2 = lambda xs: [round(x, 2) for x in xs]  # noqa: E731
    return {
        "ratio": round(o["median"] / t["median"], 3),  # per-step medians: what one load spike cannot move
        "ratio_of_means": round(o["mean"] / t["mean"], 3),
        "ours_s_per_step": round(o["median"], 2),
        "trl_s_per_step": round(t["median"], 2),
        "ours_mean_s": round(o["mean"], 2),
        "trl_mean_s": round(t["mean"], 2),
        "ours_p25_p75_s": r2(o["p25_p75"]),
        "trl_p25_p75_s": r2(t["p25_p75"]),
        "ours_min_max_s": r2(o["min_max"]),
        "trl_min_max_s": r2(t["min_max"]),
        "ours_step_s": r2(ours["step_s"]),
        "trl_step_s": r2(trl["step_s"]),
        "ours_peak_mb": round(ours["peak_mb"]),
        "trl_peak_mb": round(trl["peak_mb"]),
        "ours_heldout_pass1": ours["heldout_pass1"],
        "trl_heldout_pass1": trl["heldout_pass1"],
        "base_heldout_pass1": results["base"]["heldout_pass1"],
        "ours_sampler_logp_diff_mean": ours.get("gap", {}).get("train/sampler/logp_diff_mean"),
        "ours_sampler_logp_diff_max": ours.get("gap", {}).get("train/sampler/logp_diff_max"),
        "steps": args.steps,
        "block": args.block,
        "sequences_per_step": args.prompts_per_step * args.group_size,
        "persistent": not args.per_step,
        "ours_load_s": round(ours.get("load_s", 0.0), 1),  # persistent: worker start + model loads, once
    }


if __name__ == "__main__":
    main()
