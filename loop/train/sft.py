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
from ratchet.loop.generation.sampling import render_prompt
from ratchet.loop.train.data_parallel import global_count, make_accelerator, rank_slice
from ratchet.loop.train.examples import ChatExample, completion_token_ids, loss_mask

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100
StepFn = Callable[[int, int, float], None]  # (step, total_steps, loss)
Parts = tuple[list[int], list[int], list[int]]  # tokenize_parts: prompt ids, completion ids, loss mask


@dataclass
class SFTResult:
    checkpoint_dir: Path
    steps: int
    tokens: int
    seconds: float
    metrics: dict = field(default_factory=dict)
    rank_examples: list[int] = field(default_factory=list)  # indices of the examples this rank trained on


def tokenize_parts(tokenizer, ex: ChatExample, max_seq_len: int) -> tuple[list[int], list[int], list[int]]:
    """One example's prompt ids, completion ids and the completion's loss mask, cut to ``max_seq_len`` together.

    The prompt is rendered with the chat template exactly as at generation time; the completion is its sampled ids
    (``completion_token_ids``: text re-tokenized only where none were stored), ending in the end-of-turn token so
    the model learns to stop. When too long, prompt tokens are dropped from the left (the completion is cut only
    when it alone exceeds ``max_seq_len``). The mask is 1 on ids that carry loss, 0 on a multi-turn episode's
    environment tokens (``loss_mask``).

    Returns:
        ``(prompt_ids, completion_ids, keep)``: int lists, ``len(prompt_ids) + len(completion_ids) <= max_seq_len``
        and ``len(keep) == len(completion_ids)``.
    """
    prompt = render_prompt(tokenizer, ex.messages)
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    c_ids = completion_token_ids(tokenizer, ex)[:max_seq_len]
    keep = loss_mask(tokenizer, ex)[: len(c_ids)]  # 0 on a multi-turn episode's environment tokens
    p_ids = p_ids[-(max_seq_len - len(c_ids)) :] if max_seq_len > len(c_ids) else []
    return p_ids, c_ids, keep


def tokenize_example(tokenizer, ex: ChatExample, max_seq_len: int) -> tuple[list[int], list[int]]:
    """Token ids and labels for one example (``tokenize_parts`` joined); labels are -100 on prompt tokens and on a
    multi-turn episode's environment tokens.

    Returns:
        ``(input_ids, labels)``, two int lists of equal length <= ``max_seq_len``.
    """
    p_ids, c_ids, keep = tokenize_parts(tokenizer, ex, max_seq_len)
    return p_ids + c_ids, [IGNORE_INDEX] * len(p_ids) + [t if m else IGNORE_INDEX for t, m in zip(c_ids, keep)]


def truncation_counts(tokenizer, examples: Sequence[ChatExample], max_seq_len: int) -> dict[str, int]:
    """How many of ``examples`` ``tokenize_example`` would cut: ``train/truncated_prompts`` (prompt tokens
    dropped from the left) and ``train/truncated_completions`` (completion + EOS longer than ``max_seq_len``)."""
    prompts = completions = 0
    for ex in examples:
        p = len(tokenizer(render_prompt(tokenizer, ex.messages), add_special_tokens=False)["input_ids"])
        c = len(completion_token_ids(tokenizer, ex))
        completions += c > max_seq_len
        prompts += p + min(c, max_seq_len) > max_seq_len
    return {"train/truncated_prompts": prompts, "train/truncated_completions": completions}


def collate(batch: Sequence[Parts], pad_id: int):
    """Right-pad a batch of ``tokenize_parts`` triples. Returns ``input_ids (B, T) int64``, ``attention_mask (B, T)
    int64``, ``labels (B, T) int64`` (-100 on prompt, environment and pad tokens)."""
    import torch

    rows = [(p + c, [IGNORE_INDEX] * len(p) + [t if m else IGNORE_INDEX for t, m in zip(c, k)]) for p, c, k in batch]
    T = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), T), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for i, (x, y) in enumerate(rows):
        ids[i, : len(x)] = torch.tensor(x)
        labels[i, : len(y)] = torch.tensor(y)
        mask[i, : len(x)] = 1
    return ids, mask, labels


def packed(batch: Sequence[Parts], pad_id: int):
    """A batch of ``tokenize_parts`` triples as one packed row (``loop.train.packing.tree_batch``: identical prompts
    share a row, the prompts' common prefix runs once) and the loss mask ``(B, C) bool`` over its completions
    (True where a token carries loss and has a predictor, the tokens the padded path's labels keep)."""
    import torch

    from ratchet.loop.train.packing import common_prefix, tree_batch

    rows: dict[tuple[int, ...], int] = {}
    prompt_row = [rows.setdefault(tuple(p), len(rows)) for p, _, _ in batch]
    prompts = list(rows)
    plen = common_prefix(prompts)
    tb = tree_batch(prompts[0][:plen], [p[plen:] for p in prompts], prompt_row, [c for _, c, _ in batch], pad_id)
    keep = torch.zeros_like(tb.valid)
    for b, (_, _, k) in enumerate(batch):
        keep[b, : len(k)] = torch.tensor(k, dtype=torch.bool)
    return tb, tb.valid & keep


def loss_tokens(batch: Sequence[Parts]) -> int:
    """Completion tokens of ``batch`` that carry loss (a first token with no prompt before it has no predictor)."""
    return sum(sum(k) - (not p and bool(k) and bool(k[0])) for p, _, k in batch)


def completion_nll(logits, labels, num_tokens: float | None = None):
    """Next-token NLL over completion tokens: their sum divided by ``num_tokens`` (default: their count here, a mean).

    Args:
        logits: (B, T, V) float; labels: (B, T) int64 with -100 on ignored positions.
        num_tokens: the denominator; under data parallelism the GLOBAL completion-token count / ranks
            (see ``loop.data_parallel``), so the ranks' averaged gradient is the whole batch's.
    Returns:
        Scalar float32 loss (float64 for float64 logits).
    """
    import torch
    import torch.nn.functional as F

    shift_logits = logits[:, :-1, :]  # (B, T-1, V)
    shift_logits = shift_logits if shift_logits.dtype == torch.float64 else shift_logits.float()
    shift_labels = labels[:, 1:]  # (B, T-1)
    total = F.cross_entropy(
        shift_logits.reshape(-1, shift_logits.size(-1)), shift_labels.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
    )
    n = (shift_labels != IGNORE_INDEX).sum().clamp(min=1) if num_tokens is None else max(float(num_tokens), 1e-12)
    return total / n


def with_lora(model, r: int, alpha: int, targets, gradient_checkpointing: bool = False, *, key: str = "sft.lora_r"):
    """``model`` with LoRA adapters (peft; Hu et al. 2021) on ``targets`` when ``r > 0``, and optional gradient
    checkpointing. Merge before saving (``merge_and_unload``) to get a plain model directory.

    Raises:
        ImportError: ``r > 0`` and peft is not installed (names ``key``, the setting to change).
    """
    if r:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as e:
            raise ImportError(f"{key} > 0 needs peft; pip install 'ratchet[lora]' (or set {key} = 0)") from e
        model = get_peft_model(
            model, LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=list(targets), task_type="CAUSAL_LM")
        )
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if r:
            model.enable_input_require_grads()
    return model


def merged_lora_state(model) -> dict:
    """The weights a LoRA-adapted ``model`` (a peft ``PeftModel``) computes with, as a plain model's state dict:
    W + (alpha / r) B A per adapted layer (Hu et al. 2021, eq. 3), Hugging Face parameter names (no ``base_layer``,
    no ``lora_`` tensors), copied, so a generation engine can load them; the model itself is left unmerged.

    Raises:
        ValueError: ``model`` carries no LoRA adapters.
    """
    if not hasattr(model, "merge_adapter"):
        raise ValueError(f"merged_lora_state needs a peft model with LoRA adapters, got {type(model).__name__}")
    model.merge_adapter()  # in place, undone below: W += scale * B @ A
    try:
        return {
            name.replace(".base_layer.", "."): t.detach().clone()
            for name, t in model.get_base_model().state_dict().items()
            if ".lora_" not in name
        }
    finally:
        model.unmerge_adapter()


def _sft_step(
    accelerator, model, opt, sched, params, batch: Sequence[Parts], mine: bool, cfg: SFTConfig, step: int, pad_id: int
) -> tuple[float, int]:
    """One optimizer step on ``batch`` (``tokenize_parts`` triples), packed (``cfg.packing``) or right-padded; returns
    the whole batch's mean completion NLL (nats/token, over every rank) and this rank's tokens. ``mine`` False: a
    zero-weight pass (DDP needs one backward per rank).

    Raises:
        FloatingPointError: the loss is NaN or inf.
    """
    world = accelerator.num_processes
    n_tok = global_count(accelerator, float(loss_tokens(batch) if mine else 0))
    loss, tokens = batch_nll(model, batch, pad_id, cfg.packing, n_tok / world, accelerator.device, zero=not mine)
    if not math.isfinite(loss.item()):
        raise FloatingPointError(f"SFT loss is {loss.item()} at step {step}; lower sft.lr (now {cfg.lr}) — nothing was saved")
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(params, cfg.max_grad_norm)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return global_count(accelerator, loss.item()) / world, tokens if mine else 0


def batch_nll(
    model, batch: Sequence[Parts], pad_id: int, packing: bool, num_tokens: float | None = None, device=None, zero: bool = False
):
    """The completion NLL of ``batch`` under ``model`` (``completion_nll``'s sum over loss tokens / ``num_tokens``,
    default their count), from one packed row (``packing``) or a right-padded batch: the same value either way
    (``tests/loop/train/test_packing.py``). ``zero``: every token masked (a rank's zero-weight pass).

    Returns:
        (scalar float32 loss, the batch's prompt + completion tokens, as many with either layout).
    """
    import torch

    from ratchet.loop.train.losses import token_logprobs
    from ratchet.loop.train.packing import tree_logits

    device = device or next(model.parameters()).device
    tokens = sum(len(p) + len(c) for p, c, _ in batch)
    if not packing:
        ids, mask, labels = (t.to(device) for t in collate(batch, pad_id))
        if zero:
            labels = torch.full_like(labels, IGNORE_INDEX)
        return completion_nll(model(input_ids=ids, attention_mask=mask).logits, labels, num_tokens), tokens
    tb, keep = packed(batch, pad_id)
    keep = torch.zeros_like(keep) if zero else keep.to(device)  # (B, C) bool
    lp = token_logprobs(tree_logits(model, tb), tb.completion_ids.to(device))  # (B, C) float32
    n = keep.sum().clamp(min=1) if num_tokens is None else max(float(num_tokens), 1e-12)
    return -(lp * keep).sum() / n, tokens


def train_sft(
    init_dir: str | Path,
    examples: Sequence[ChatExample],
    out_dir: str | Path,
    cfg: SFTConfig,
    *,
    seed: int | None = None,
    dtype: str = "float32",
    on_step: StepFn | None = None,
) -> SFTResult:
    """Fine-tune the checkpoint at ``init_dir`` on ``examples`` with ``cfg`` and save to ``out_dir`` (safetensors).

    ``seed`` overrides ``cfg.seed`` (a round passes its derived seed, ``ratchet.common.seeds``). With
    ``cfg.lora_r > 0`` only LoRA adapters train; they are merged into the saved checkpoint.

    Data parallel (``accelerate launch --num_processes R``): each rank trains on its disjoint slice of every
    batch (``loop.data_parallel.rank_slice``; ``SFTResult.rank_examples`` lists it) and normalizes its token
    sum by the batch's GLOBAL completion-token count (all-reduced) / R, so DDP's averaged gradient equals the
    one-process gradient of the whole batch (``loop.data_parallel``).

    Raises:
        ValueError: no examples.
        FloatingPointError: the loss became NaN or inf (nothing is saved).
        ImportError: ``cfg.lora_r > 0`` without peft.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, get_linear_schedule_with_warmup

    if not examples:
        raise ValueError(
            "no training examples: no verified-correct trajectories this round; raise group_size or lower difficulty"
        )
    t0 = time.perf_counter()
    seed = cfg.seed if seed is None else seed
    torch.manual_seed(seed)
    accelerator = make_accelerator()
    rank, world = accelerator.process_index, accelerator.num_processes
    tok = AutoTokenizer.from_pretrained(init_dir)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    model = AutoModelForCausalLM.from_pretrained(init_dir, dtype=getattr(torch, dtype))
    model.config.use_cache = False
    model = with_lora(model, cfg.lora_r, cfg.lora_alpha, cfg.lora_target_modules)
    data = [tokenize_parts(tok, ex, cfg.max_seq_len) for ex in examples]
    if retok := sum(ex.completion_ids is None for ex in examples):
        logger.info(
            "%d of %d examples have no sampled token ids (reference text, or an older store): tokenized from text",
            retok,
            len(examples),
        )
    steps_per_epoch = math.ceil(len(data) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    sched = get_linear_schedule_with_warmup(opt, int(cfg.warmup_ratio * total), total)
    # The scheduler is not prepared: accelerate would step it once per rank (it assumes a split dataloader).
    model, opt = accelerator.prepare(model, opt)
    model.train()
    rng = random.Random(seed)
    losses: list[float] = []
    tokens, mine = 0, set()
    for _epoch in range(cfg.epochs):
        order = list(range(len(data)))
        rng.shuffle(order)
        for b in range(steps_per_epoch):
            full = order[b * cfg.batch_size : (b + 1) * cfg.batch_size]
            share = rank_slice(full, rank, world)
            mine.update(share)
            batch = [data[i] for i in share or full[:1]]  # an empty share: a zero-weight pass (DDP needs one backward)
            loss, n = _sft_step(accelerator, model, opt, sched, params, batch, bool(share), cfg, len(losses), pad_id)
            losses.append(loss)
            tokens += n
            if on_step:
                on_step(len(losses), total, losses[-1])
    _save(accelerator, model, tok, Path(out_dir), cfg)
    dt = time.perf_counter() - t0
    metrics = {
        "train/loss_first": losses[0],
        "train/loss_last": losses[-1],
        "train/loss_mean": sum(losses) / len(losses),
        "train/examples": len(data),
        "train/retokenized": retok,
        **truncation_counts(tok, examples, cfg.max_seq_len),
        "train/ranks": world,
        "perf/train_tokens_per_s": global_count(accelerator, tokens) / dt,
    }
    return SFTResult(Path(out_dir), len(losses), tokens, dt, metrics, sorted(mine))


def _save(accelerator, model, tok, out_dir: Path, cfg: SFTConfig) -> None:
    """Rank 0 writes the model (LoRA merged); under FSDP every rank takes part in gathering the full state dict."""
    state = accelerator.get_state_dict(model) if accelerator.distributed_type.name == "FSDP" else None
    unwrapped = accelerator.unwrap_model(model)
    if cfg.lora_r:
        unwrapped = unwrapped.merge_and_unload()
    unwrapped.config.use_cache = True
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:  # one writer under `accelerate launch` (every rank holds the same weights)
        unwrapped.save_pretrained(out_dir, state_dict=state)
        tok.save_pretrained(out_dir)
    accelerator.wait_for_everyone()
