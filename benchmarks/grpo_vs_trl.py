"""Ratchet's GRPO steps vs TRL's ``GRPOTrainer``: same model, prompts, G, max length, optimizer and steps.

A step is one on-policy iteration in both: generate G completions for each of ``--prompts-per-step``
prompts from the current policy, score them with Ratchet's verifier, one optimizer step. Ratchet's
step is what a round's ``grpo.steps_per_round`` iteration does (transformers backend from the
checkpoint, ``score_batch``, ``train_grpo`` from that checkpoint with the optimizer state carried,
checkpoint saved); TRL keeps its model in memory. Both use GRPO advantages (std-scaled), the
``grpo`` loss (seq-mean-token-mean), eps 0.2, beta 0, AdamW (0.9, 0.99) at a constant LR, grad-norm
clip 1.0, temperature 0.8, completions cut at ``--max-new-tokens`` masked, and keep zero-variance
groups (TRL has no dynamic sampling). Each side runs in its own child process (peak RSS is that
child's), one after the other. Held-out pass@1 (greedy, the demo's held-out prompts, Ratchet's
verifier) is measured on both final policies by the same code.

Prints progress and, as its LAST line, a JSON object with ``ours_s_per_step``, ``trl_s_per_step``,
``ratio`` (ours / TRL; target <= 0.5), ``ours_peak_mb``, ``trl_peak_mb``, ``ours_heldout_pass1``,
``trl_heldout_pass1`` (target: ours >= TRL's) and the base model's ``base_heldout_pass1``.

By default Ratchet's side runs as a persistent round does (``compute.persistent_rollout``): one
``RolloutWorker`` child keeps the engine and a ``GRPOLearner`` loaded for all steps, each pass's weights go
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


def _setup(args):
    """Model dir, train prompts (one chunk per step), held-out prompts and the chat renderer, as the demo builds them."""
    from ratchet.loop.checkpoints import resolve_model
    from ratchet.loop.config import RatchetConfig
    from ratchet.loop.tasks.sources import chat_messages, make_task_source

    cfg = RatchetConfig()
    t = cfg.tasks
    src = make_task_source(t.source, levels=t.levels, path=t.path, heldout_fraction=t.heldout_fraction)
    shots = src.fewshot(t.fewshot)
    train = src.draw(args.steps * args.prompts_per_step, "train", seed=args.seed)
    heldout = src.draw(t.heldout_prompts, "heldout", seed=t.seed)
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
    from ratchet.loop.generation.base import SamplingParams
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
    from ratchet.loop.train.grpo import GRPOSample
    from ratchet.loop.train.sft import SFTExample

    rewards = _rewards([c.text for c in comps], [prompts[c.prompt_index].answer for c in comps], cfg)
    return [
        GRPOSample(c.prompt_index, SFTExample(render(prompts[c.prompt_index].question), c.text), r, c.finish_reason == "length")
        for c, r in zip(comps, rewards)
    ]


def run_ours(args, out: Path) -> dict:
    from ratchet.loop.config import GRPOConfig
    from ratchet.loop.generation.base import SamplingParams
    from ratchet.loop.generation.transformers_backend import TransformersBackend
    from ratchet.loop.train.grpo import GRPORun, train_grpo

    base, train, heldout, render, cfg = _setup(args)
    st = GRPOConfig(
        advantage="grpo",
        loss_type="grpo",
        beta=0.0,
        dynamic_sampling=False,
        mask_truncated=True,
        lr=args.lr,
        ppo_epochs=1,
        mini_batch_size=args.prompts_per_step * args.group_size,
        micro_batch_size=min(8, args.prompts_per_step * args.group_size),
    )
    run = GRPORun(temperature=0.8, max_completion_length=args.max_new_tokens, seed=args.seed)
    if not args.per_step:
        return _run_ours_persistent(args, out, st, run)
    policy, times = base, []
    for step in range(args.steps):
        t0 = time.perf_counter()
        prompts = train[step * args.prompts_per_step : (step + 1) * args.prompts_per_step]
        b = TransformersBackend(policy, batch_size=cfg.generation.batch_size)
        comps = b.generate(
            [render(p.question) for p in prompts],
            SamplingParams(n=args.group_size, temperature=0.8, max_new_tokens=args.max_new_tokens, seed=args.seed + step),
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
    return {"s_per_step": sum(times) / len(times), "step_s": times, "heldout_pass1": heldout_pass1(policy, heldout, render, cfg)}


def _run_ours_persistent(args, out: Path, st, run) -> dict:
    """Ratchet's steps as a persistent round runs them: one ``RolloutWorker`` child holds the engine and a
    ``GRPOLearner``; after each pass the learner's weights go into the running engine in place; only the final
    policy is saved (one checkpoint). Worker start and model load count in the first step."""
    import logging

    from ratchet.flows.compute.rollout import RolloutWorker
    from ratchet.loop.config import ComputeConfig
    from ratchet.loop.generation.base import SamplingParams

    base, train, heldout, render, cfg = _setup(args)
    log = logging.getLogger("grpo_vs_trl")
    compute = ComputeConfig(device_slots=False, cpu_threads_per_worker=int(os.environ["OMP_NUM_THREADS"]))
    times, t0 = [], time.perf_counter()
    with RolloutWorker(base, out / "rollout-worker", gen=cfg.generation, compute=compute, dtype="float32", log=log) as w:
        w.init_learner(base, st, "float32", ref_dir=base)
        load_s, t0 = time.perf_counter() - t0, time.perf_counter()  # once per round; TRL's model load is not timed either
        print(f"ours (persistent): worker started, engine and learner loaded in {load_s:.1f} s", flush=True)
        for step in range(args.steps):
            prompts = train[step * args.prompts_per_step : (step + 1) * args.prompts_per_step]
            comps = w.generate(
                [render(p.question) for p in prompts],
                SamplingParams(n=args.group_size, temperature=0.8, max_new_tokens=args.max_new_tokens, seed=args.seed + step),
            )
            t_gen = time.perf_counter() - t0
            samples = _samples(comps, prompts, render, cfg)
            last = step == args.steps - 1  # as a round: at beta = 0 the KL guard's reference pass on the last step only
            res = w.train_pass(samples, dataclasses.replace(run, measure_kl=last))  # new weights go into the engine in place
            times.append(time.perf_counter() - t0)
            print(
                f"ours (persistent) step {step}: {times[-1]:.1f} s (generation {t_gen:.1f} s, train pass "
                f"{res['seconds']:.1f} s), reward mean {sum(s.reward for s in samples) / len(samples):.3f}",
                flush=True,
            )
            t0 = time.perf_counter()
        w.save(out / "ours-final")
    return {
        "s_per_step": sum(times) / len(times),
        "step_s": times,
        "load_s": load_s,
        "heldout_pass1": heldout_pass1(out / "ours-final", heldout, render, cfg),
    }


def run_trl(args, out: Path) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    base, train, heldout, render, cfg = _setup(args)
    ds = Dataset.from_list([{"prompt": render(p.question), "answer": p.answer} for p in train])

    def reward(prompts, completions, answer, **_):
        return _rewards([c[-1]["content"] if isinstance(c, list) else c for c in completions], list(answer), cfg)

    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.t0)
            print(f"trl step {len(times) - 1}: {times[-1]:.1f} s", flush=True)

    targs = GRPOConfig(
        output_dir=str(out / "trl"),
        per_device_train_batch_size=args.prompts_per_step * args.group_size,
        num_generations=args.group_size,
        max_completion_length=args.max_new_tokens,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        adam_beta2=0.99,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=0.0,
        loss_type="grpo",
        scale_rewards="group",
        epsilon=0.2,
        num_iterations=1,
        temperature=0.8,
        top_p=1.0,
        top_k=0,
        mask_truncated_completions=True,
        max_steps=args.steps,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=args.seed,
        shuffle_dataset=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=str(base), reward_funcs=reward, args=targs, train_dataset=ds, callbacks=[Clock()])
    trainer.train()
    final = out / "trl-final"
    trainer.model.save_pretrained(final)
    trainer.processing_class.save_pretrained(final)
    return {"s_per_step": sum(times) / len(times), "step_s": times, "heldout_pass1": heldout_pass1(final, heldout, render, cfg)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompts-per-step", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-6)
    ap.add_argument("--seed", type=int, default=0)
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
    results = {}
    with tempfile.TemporaryDirectory(prefix="grpo-bench-") as tmp:
        for side in ("base", "ours", "trl"):
            cmd = (
                [sys.executable, __file__, "--side", side, "--out", tmp]
                + [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("side", "out", "per_step")]
                + (["--per-step"] if args.per_step else [])
            )
            proc = subprocess.run(cmd, capture_output=True, text=True)
            lines = proc.stdout.splitlines()
            for line in lines:
                if not line.startswith("RESULT "):
                    print(f"[{side}] {line}", flush=True)
            if proc.returncode != 0:
                sys.exit(f"{side} side failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
            results[side] = json.loads(next(l for l in lines if l.startswith("RESULT "))[7:])
    ours, trl = results["ours"], results["trl"]
    print(
        json.dumps(
            {
                "ours_s_per_step": round(ours["s_per_step"], 2),
                "trl_s_per_step": round(trl["s_per_step"], 2),
                "ratio": round(ours["s_per_step"] / trl["s_per_step"], 3),
                "ours_peak_mb": round(ours["peak_mb"]),
                "trl_peak_mb": round(trl["peak_mb"]),
                "ours_heldout_pass1": ours["heldout_pass1"],
                "trl_heldout_pass1": trl["heldout_pass1"],
                "base_heldout_pass1": results["base"]["heldout_pass1"],
                "steps": args.steps,
                "sequences_per_step": args.prompts_per_step * args.group_size,
                "persistent": not args.per_step,
                "ours_load_s": round(ours.get("load_s", 0.0), 1),  # persistent: worker start + model loads, once
            }
        )
    )


if __name__ == "__main__":
    main()
