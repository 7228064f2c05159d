"""Ratchet's RFT pass vs TRL's ``SFTTrainer``: the same examples, model, optimizer, schedule and batch size.

The examples are the demo's first RFT round's training set, built as a round builds it: the demo's train prompts
(``tasks.train_prompts_per_round`` of them, the demo's system prompt and few-shot turns), ``generation.group_size``
completions each sampled by SmolLM2-135M with Ratchet's transformers backend at the round's temperature, scored by
Ratchet's math verifier, and the verified-correct ones kept (distinct texts, at most ``sft.max_per_prompt`` per
prompt). Ratchet's side trains on the sampled token ids with ``ratchet.loop.train.sft.train_sft``, once packed
(``sft.packing = true``: one row per batch, no padding, each shared prompt computed once) and once right-padded;
TRL's side gets the same chats as conversational prompt-completion records (TRL tokenizes them itself; completion-only
loss), padded (TRL's default; its ``padding_free`` needs flash attention, which CPUs lack).

Both sides: float32, ``sft.lr`` with linear warmup (``sft.warmup_ratio``) and linear decay, AdamW betas (0.9, 0.95),
weight decay ``sft.weight_decay``, grad-norm clip ``sft.max_grad_norm``, ``sft.batch_size`` examples per optimizer step,
``sft.epochs`` passes, ``sft.max_seq_len`` tokens, no gradient checkpointing (TRL's default is on: set off here, as
Ratchet trains without it), the same threads. All three run in one process, loaded before the clock starts, and
take turns for ``--repeats`` rounds (packed, padded, TRL, packed, ...) so a load spike hits every side alike. A step's
time is from one optimizer step's end to the next (batching, forward, backward, clip, optimizer): step 0 of each pass
(the warm-up) is left out of the medians.

Prints progress and, as its LAST line, a JSON object: ``ratio`` (Ratchet packed ÷ TRL, medians of per-step seconds;
target <= 0.7), ``ratio_padded`` (Ratchet padded ÷ TRL), the medians ``ours_s_per_step`` / ``ours_padded_s_per_step``
/ ``trl_s_per_step``, ``examples``, ``steps_per_pass``, ``tokens`` (prompt + completion tokens of the set, as Ratchet
tokenizes it) and each side's mean training loss over its passes (``*_loss_mean``; nats per completion token).

Run: ``.venv/bin/python benchmarks/rft_vs_trl.py`` (about 7 minutes on 2 cores; ``--repeats 1 --prompts 8`` for a
quick look).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")


def demo_rft_examples(n_prompts: int | None, seed: int) -> tuple[str, list, object]:
    """(model dir, the demo's first-round RFT examples as ``ChatExample``s, the demo config)."""
    from ratchet.loop.checkpoints import resolve_model
    from ratchet.loop.config import RatchetConfig
    from ratchet.loop.generation.sampling import SamplingParams
    from ratchet.loop.generation.transformers_backend import TransformersBackend
    from ratchet.loop.tasks.sources import chat_messages, make_task_source
    from ratchet.loop.train.examples import ChatExample
    from ratchet.verifiers.reward import score_batch

    cfg = RatchetConfig()
    t, g = cfg.tasks, cfg.generation
    src = make_task_source(t.source, levels=t.levels, heldout_fraction=t.heldout_fraction)
    shots = src.fewshot(t.fewshot)
    prompts = src.draw(n_prompts or t.train_prompts_per_round, "train", seed=seed)
    chats = [chat_messages(t.system_prompt, shots, p.question) for p in prompts]
    model = str(resolve_model(cfg.model.name_or_path))
    backend = TransformersBackend(model, batch_size=g.batch_size)
    params = SamplingParams(n=g.group_size, temperature=cfg.rollout_temperature, max_new_tokens=g.max_new_tokens, seed=seed)
    comps = backend.generate(chats, params)
    backend.close()
    v = cfg.verifier
    verdicts = score_batch(
        [c.text for c in comps],
        [prompts[c.prompt_index].answer for c in comps],
        kind="math",
        format_template=v.format_template,
        format_weight=v.format_weight,
        timeout_s=v.timeout_s,
    )
    kept: dict[int, list] = {}
    for c, verdict in zip(comps, verdicts, strict=True):
        mine = kept.setdefault(c.prompt_index, [])
        if verdict.correct and c.text not in {e.completion for e in mine} and len(mine) < cfg.sft.max_per_prompt:
            mine.append(ChatExample(chats[c.prompt_index], c.text, tuple(c.token_ids), verdict.read_chars))
    examples = [e for i in sorted(kept) for e in kept[i]]
    print(f"{len(examples)} verified-correct examples from {len(prompts)} prompts x {g.group_size}", flush=True)
    return model, examples, cfg


class _Clock:
    """Times of the ends of optimizer steps, one list per pass."""

    def __init__(self) -> None:
        self.passes: list[list[float]] = []

    def start(self) -> None:
        self.passes.append([])

    def tick(self, *_a) -> None:
        self.passes[-1].append(time.perf_counter())

    def step_s(self) -> list[float]:
        """Per-step seconds of every pass, each pass's first step (warm-up, no start mark) left out."""
        return [b - a for p in self.passes for a, b in zip(p, p[1:], strict=False)]


def ours_pass(model_dir: str, examples, cfg, packing: bool, clock: _Clock, seed: int) -> float:
    """One ``train_sft`` pass; returns its mean loss."""
    from ratchet.loop.train.sft import train_sft

    with tempfile.TemporaryDirectory() as out:
        clock.start()
        res = train_sft(model_dir, examples, out, cfg.sft.model_copy(update={"packing": packing}), seed=seed, on_step=clock.tick)
    return res.metrics["train/loss_mean"]


def trl_trainer(model_dir: str, examples, cfg, clock: _Clock, out: str, seed: int):
    """TRL's ``SFTTrainer`` over ``examples`` with Ratchet's SFT settings; ``clock`` ticks at each step's end."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    s = cfg.sft
    total = math.ceil(len(examples) / s.batch_size) * s.epochs
    records = [{"prompt": e.messages, "completion": [{"role": "assistant", "content": e.completion}]} for e in examples]

    class Tick(TrainerCallback):
        def on_train_begin(self, *_a, **_k):
            clock.start()

        def on_step_end(self, *_a, **_k):
            clock.tick()

    args = SFTConfig(
        output_dir=out,
        learning_rate=s.lr,
        num_train_epochs=s.epochs,
        per_device_train_batch_size=s.batch_size,
        gradient_accumulation_steps=1,
        lr_scheduler_type="linear",
        warmup_steps=int(s.warmup_ratio * total),  # train_sft's count (transformers 5 has no warmup_ratio)
        weight_decay=s.weight_decay,
        adam_beta1=0.9,
        adam_beta2=0.95,
        max_grad_norm=s.max_grad_norm,
        max_length=s.max_seq_len,
        completion_only_loss=True,
        packing=False,
        padding_free=False,
        gradient_checkpointing=False,
        bf16=False,
        fp16=False,
        use_cpu=not torch.cuda.is_available(),
        seed=seed,
        data_seed=seed,
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(records), processing_class=tok, callbacks=[Tick()])


def trl_pass(model_dir: str, examples, cfg, clock: _Clock, seed: int) -> float:
    """One TRL pass from a fresh model (loaded and tokenized before its clock starts); returns its mean loss."""
    with tempfile.TemporaryDirectory() as out:
        trainer = trl_trainer(model_dir, examples, cfg, clock, out, seed)
        res = trainer.train()
    return float(res.training_loss)


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="passes per side, taken in turns")
    ap.add_argument("--prompts", type=int, default=None, help="train prompts (default: the demo's per round)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    t0 = time.perf_counter()
    model, examples, cfg = demo_rft_examples(args.prompts, args.seed)
    if not examples:
        sys.exit("no verified-correct completions to train on: raise --prompts")
    from transformers import AutoTokenizer

    from ratchet.loop.train.sft import tokenize_parts

    tok = AutoTokenizer.from_pretrained(model)
    tokens = sum(len(p) + len(c) for p, c, _ in (tokenize_parts(tok, e, cfg.sft.max_seq_len) for e in examples))
    clocks = {"packed": _Clock(), "padded": _Clock(), "trl": _Clock()}
    losses: dict[str, list[float]] = {k: [] for k in clocks}
    for r in range(args.repeats):
        for side, clock in clocks.items():
            t = time.perf_counter()
            if side == "trl":
                loss = trl_pass(model, examples, cfg, clock, args.seed + r)
            else:
                loss = ours_pass(model, examples, cfg, side == "packed", clock, args.seed + r)
            losses[side].append(loss)
            steps = clock.passes[-1]
            print(f"repeat {r} {side}: {len(steps)} steps in {time.perf_counter() - t:.1f} s, loss {loss:.4f}", flush=True)
    med = {k: _median(c.step_s()) for k, c in clocks.items()}
    ratio = lambda a: round(med[a] / med["trl"], 3) if med[a] and med["trl"] else None  # noqa: E731
    out = {
        "ratio": ratio("packed"),
        "ratio_padded": ratio("padded"),
        "ours_s_per_step": med["packed"],
        "ours_padded_s_per_step": med["padded"],
        "trl_s_per_step": med["trl"],
        "step_s": {k: [round(x, 3) for x in c.step_s()] for k, c in clocks.items()},
        "examples": len(examples),
        "steps_per_pass": len(clocks["packed"].passes[0]),
        "tokens": tokens,
        "ours_loss_mean": round(statistics.mean(losses["packed"]), 4),
        "ours_padded_loss_mean": round(statistics.mean(losses["padded"]), 4),
        "trl_loss_mean": round(statistics.mean(losses["trl"]), 4),
        "repeats": args.repeats,
        "threads": torch.get_num_threads(),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(out), flush=True)
    return out


if __name__ == "__main__":
    main()
