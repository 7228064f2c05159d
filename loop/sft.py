"""Rejection-sampling fine-tuning (RFT / expert iteration): SFT on the round's verified-correct trajectories.

The loss is token-level cross-entropy on completion tokens only (prompt tokens are masked with
-100), averaged over all completion tokens of a batch: the SFT objective of STaR (Zelikman et al.
2022) and ReST-EM (Singh et al. 2023, eq. 2 with binary reward). ``accelerate`` places the model
and handles gradient synchronisation, so the same code runs on one CPU or several GPUs.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ratchet.loop.config import SFTConfig
from ratchet.loop.generation import render_prompt

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100
StepFn = Callable[[int, int, float], None]  # (step, total_steps, loss)


@dataclass(frozen=True)
class SFTExample:
    """A chat prompt and the completion to imitate."""

    messages: list[dict[str, str]]
    completion: str


@dataclass
class SFTResult:
    checkpoint_dir: Path
    steps: int
    tokens: int
    seconds: float
    metrics: dict = field(default_factory=dict)


def tokenize_example(tokenizer, ex: SFTExample, max_seq_len: int) -> tuple[list[int], list[int]]:
    """Token ids and labels for one example; labels are -100 on prompt tokens.

    The prompt is rendered with the chat template exactly as at generation time; the completion is
    followed by the template's end-of-turn token so the model learns to stop. When too long, prompt
    tokens are dropped from the left (the completion is never cut).

    Returns:
        ``(input_ids, labels)``, two int lists of equal length <= ``max_seq_len``.
    """
    prompt = render_prompt(tokenizer, ex.messages)
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    c_ids = tokenizer(ex.completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    c_ids = c_ids[:max_seq_len]
    p_ids = p_ids[-(max_seq_len - len(c_ids)) :] if max_seq_len > len(c_ids) else []
    return p_ids + c_ids, [IGNORE_INDEX] * len(p_ids) + c_ids


def collate(batch: Sequence[tuple[list[int], list[int]]], pad_id: int):
    """Right-pad a batch. Returns ``input_ids (B, T) int64``, ``attention_mask (B, T) int64``, ``labels (B, T) int64``."""
    import torch

    T = max(len(ids) for ids, _ in batch)
    ids = torch.full((len(batch), T), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), T), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(batch), T), dtype=torch.long)
    for i, (x, y) in enumerate(batch):
        ids[i, : len(x)] = torch.tensor(x)
        labels[i, : len(y)] = torch.tensor(y)
        mask[i, : len(x)] = 1
    return ids, mask, labels


def completion_nll(logits, labels):
    """Mean next-token NLL over completion tokens.

    Args:
        logits: (B, T, V) float; labels: (B, T) int64 with -100 on ignored positions.
    Returns:
        Scalar float32 loss: sum of -log p(token) over unmasked targets / their count.
    """
    import torch.nn.functional as F

    shift_logits = logits[:, :-1, :].float()  # (B, T-1, V)
    shift_labels = labels[:, 1:]  # (B, T-1)
    return F.cross_entropy(shift_logits.reshape(-1, shift_logits.size(-1)), shift_labels.reshape(-1), ignore_index=IGNORE_INDEX)


def train_sft(
    init_dir: str | Path,
    examples: Sequence[SFTExample],
    out_dir: str | Path,
    cfg: SFTConfig,
    *,
    seed: int | None = None,
    dtype: str = "float32",
    on_step: StepFn | None = None,
) -> SFTResult:
    """Fine-tune the checkpoint at ``init_dir`` on ``examples`` with ``cfg`` and save to ``out_dir`` (safetensors).

    ``seed`` overrides ``cfg.seed`` (a round passes its derived seed, ``ratchet.common.seeds``).

    Raises:
        ValueError: no examples.
        FloatingPointError: the loss became NaN or inf (nothing is saved).
    """
    import torch
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM, AutoTokenizer, get_linear_schedule_with_warmup

    if not examples:
        raise ValueError(
            "no training examples: no verified-correct trajectories this round; raise group_size or lower difficulty"
        )
    t0 = time.perf_counter()
    seed = cfg.seed if seed is None else seed
    lr, epochs, batch_size, max_seq_len = cfg.lr, cfg.epochs, cfg.batch_size, cfg.max_seq_len
    torch.manual_seed(seed)
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    tok = AutoTokenizer.from_pretrained(init_dir)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    model = AutoModelForCausalLM.from_pretrained(init_dir, dtype=getattr(torch, dtype))
    model.config.use_cache = False
    data = [tokenize_example(tok, ex, max_seq_len) for ex in examples]
    steps_per_epoch = math.ceil(len(data) / batch_size)
    total = steps_per_epoch * epochs
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    sched = get_linear_schedule_with_warmup(opt, int(cfg.warmup_ratio * total), total)
    model, opt, sched = accelerator.prepare(model, opt, sched)
    model.train()
    rng = random.Random(seed)
    losses: list[float] = []
    tokens = 0
    step = 0
    for _epoch in range(epochs):
        order = list(range(len(data)))
        rng.shuffle(order)
        for b in range(steps_per_epoch):
            batch = [data[i] for i in order[b * batch_size : (b + 1) * batch_size]]
            ids, mask, labels = (t.to(accelerator.device) for t in collate(batch, pad_id))
            logits = model(input_ids=ids, attention_mask=mask).logits  # (B, T, V)
            loss = completion_nll(logits, labels)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"SFT loss is {loss.item()} at step {step}; lower sft.lr (now {lr}) — nothing was saved")
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
            tokens += int(mask.sum())
            step += 1
            if on_step:
                on_step(step, total, losses[-1])
    out_dir = Path(out_dir)
    unwrapped = accelerator.unwrap_model(model)
    unwrapped.config.use_cache = True
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:  # one writer under `accelerate launch` (every rank holds the same weights)
        unwrapped.save_pretrained(out_dir)
        tok.save_pretrained(out_dir)
    accelerator.wait_for_everyone()
    dt = time.perf_counter() - t0
    metrics = {
        "train/loss_first": losses[0],
        "train/loss_last": losses[-1],
        "train/loss_mean": sum(losses) / len(losses),
        "train/examples": len(data),
        "perf/train_tokens_per_s": tokens / dt,
    }
    return SFTResult(out_dir, step, tokens, dt, metrics)
