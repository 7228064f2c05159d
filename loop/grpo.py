"""GRPO-family policy-gradient pass over a round's verified groups (GRPO, Dr. GRPO, DAPO, GSPO, RLOO).

The math lives in ``loop.advantages`` and ``loop.losses`` (checked against TRL's GRPOTrainer to
1e-5); this module only orchestrates: tokenize the groups, compute advantages, compute the old
log-probs once at the start of the pass (and the frozen reference's, when beta > 0), then
``ppo_epochs`` passes of mini-batch updates with gradient accumulation and clipping, under
``accelerate`` so the same code runs on one CPU or many GPUs. Guard metrics are returned per
optimizer step; a NaN or inf aborts the pass before anything is saved.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Sequence

from loop.sft import SFTExample

StepFn = Callable[[int, int, dict], None]  # (step, total_steps, metrics)


@dataclass(frozen=True)
class GRPOSample:
    """One completion of a group: its chat prompt, text, scalar reward and whether it hit the length cap."""

    group: int
    example: SFTExample
    reward: float
    truncated: bool


@dataclass(frozen=True)
class GRPOSettings:
    """Hyper-parameters of one GRPO pass (see ``loop.config.GRPOConfig`` for the help text)."""

    advantage: Literal["grpo", "dr_grpo", "rloo"] = "grpo"
    loss_type: Literal["grpo", "dr_grpo", "dapo"] = "grpo"
    importance_sampling_level: Literal["token", "sequence"] = "token"
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    beta: float = 0.0
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    dynamic_sampling: bool = True
    mask_truncated: bool = True
    lr: float = 1e-5
    ppo_epochs: int = 1
    mini_batch_size: int = 16
    micro_batch_size: int = 8
    max_grad_norm: float = 1.0
    temperature: float = 0.8
    max_completion_length: int = 32
    max_seq_len: int = 256
    seed: int = 0


@dataclass
class GRPOResult:
    checkpoint_dir: Path | None
    steps: int
    seconds: float
    metrics: dict = field(default_factory=dict)
    step_metrics: list[dict] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)  # indices of the samples that entered the loss


def _tokenize(tok, samples: Sequence[GRPOSample], max_seq_len: int):
    """Prompt ids left-padded, completion ids right-padded (as at sampling time).

    Returns:
        input_ids (B, P + C) int64, attention_mask (B, P + C) int64, completion_ids (B, C) int64,
        completion_mask (B, C) bool, P (int).
    """
    import torch

    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    prompts, comps = [], []
    for s in samples:
        p = tok(tok.apply_chat_template(s.example.messages, tokenize=False, add_generation_prompt=True), add_special_tokens=False)["input_ids"]
        c = tok(s.example.completion, add_special_tokens=False)["input_ids"] + ([] if s.truncated else [tok.eos_token_id])
        c = c[: max_seq_len // 2]
        prompts.append(p[-(max_seq_len - len(c)):])
        comps.append(c)
    P, C = max(map(len, prompts)), max(max(map(len, comps)), 1)
    ids = torch.full((len(samples), P + C), pad, dtype=torch.long)
    attn = torch.zeros((len(samples), P + C), dtype=torch.long)
    cmask = torch.zeros((len(samples), C), dtype=torch.bool)
    for i, (p, c) in enumerate(zip(prompts, comps)):
        ids[i, P - len(p):P] = torch.tensor(p)
        ids[i, P:P + len(c)] = torch.tensor(c, dtype=torch.long)
        attn[i, P - len(p):P + len(c)] = 1
        cmask[i, :len(c)] = True
    return ids, attn, ids[:, P:], cmask, P


def completion_logprobs(model, input_ids, attention_mask, P: int, temperature: float, with_entropy: bool = False):
    """Per-token log-probs (and entropy) of the completion under ``model``.

    Positions come from the attention mask, so left-padded prompts get the positions they had at
    generation time.

    Returns:
        logprobs (B, C) float32 and entropy (B, C) float32 or None.
    """
    from loop.losses import entropy_from_logits, token_logprobs

    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, P + C)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits[:, P - 1:-1]  # (B, C, V)
    lp = token_logprobs(logits, input_ids[:, P:], temperature)
    ent = entropy_from_logits(logits.detach(), temperature) if with_entropy else None
    return lp, ent


def group_advantages(samples: Sequence[GRPOSample], estimator: str, dynamic_sampling: bool):
    """Advantages per sample and the kept sample indices.

    Returns:
        advantages (N,) float32 aligned with ``samples``, kept indices (list[int]), zero-variance group count.
    Raises:
        ValueError: groups of unequal size, or G < 2.
    """
    import torch

    from loop.advantages import compute_advantages, zero_variance_mask

    groups: dict[int, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(s.group, []).append(i)
    sizes = {len(v) for v in groups.values()}
    if len(sizes) != 1:
        raise ValueError(f"groups have unequal sizes {sorted(sizes)}; every prompt needs the same G completions")
    order = [groups[g] for g in sorted(groups)]
    rewards = torch.tensor([[samples[i].reward for i in idx] for idx in order], dtype=torch.float32)  # (num_groups, G)
    adv = compute_advantages(estimator, rewards)  # (num_groups, G)
    zero = zero_variance_mask(rewards)  # (num_groups,)
    out = torch.zeros(len(samples), dtype=torch.float32)
    kept: list[int] = []
    for g, idx in enumerate(order):
        out[idx] = adv[g]
        if not (dynamic_sampling and bool(zero[g])):
            kept += idx
    return out, sorted(kept), int(zero.sum())


def train_grpo(init_dir: str | Path, samples: Sequence[GRPOSample], out_dir: str | Path, s: GRPOSettings, *,
               ref_dir: str | Path | None = None, dtype: str = "float32", on_step: StepFn | None = None) -> GRPOResult:
    """One GRPO-family pass from the checkpoint at ``init_dir``; saves the policy to ``out_dir``.

    Returns ``checkpoint_dir=None`` (nothing saved) when dynamic sampling leaves no group with signal.

    Raises:
        ValueError: bad groups or settings. FloatingPointError: a NaN/inf loss or gradient norm.
    """
    import torch
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from loop.losses import PolicyLossConfig, mask_truncated, policy_loss

    t0 = time.perf_counter()
    torch.manual_seed(s.seed)
    adv, kept, zero_groups = group_advantages(samples, s.advantage, s.dynamic_sampling)
    n_groups = len({x.group for x in samples})
    base = {"train/reward_mean": float(sum(x.reward for x in samples) / len(samples)),
            "train/reward_std": float(torch.tensor([x.reward for x in samples]).std(unbiased=False)),
            "train/zero_variance_frac": zero_groups / n_groups, "train/sequences": len(kept)}
    if not kept:
        return GRPOResult(None, 0, time.perf_counter() - t0, base, [], [])
    loss_cfg = PolicyLossConfig.from_trl(s.loss_type, epsilon_low=s.epsilon_low, epsilon_high=s.epsilon_high,
                                         importance_sampling_level=s.importance_sampling_level, beta=s.beta,
                                         kl_estimator=s.kl_estimator, max_completion_length=s.max_completion_length)
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    tok = AutoTokenizer.from_pretrained(init_dir)
    policy = AutoModelForCausalLM.from_pretrained(init_dir, dtype=getattr(torch, dtype))
    batch = [samples[i] for i in kept]
    ids, attn, comp_ids, cmask, P = _tokenize(tok, batch, s.max_seq_len)
    lengths = cmask.sum(-1).float()  # (N,) completion lengths, tokens
    if s.mask_truncated:  # DAPO overlong filtering: truncated completions carry no loss
        cmask = mask_truncated(cmask, torch.tensor([x.truncated for x in batch]))
    advantages = adv[kept]  # (N,)
    opt = torch.optim.AdamW(policy.parameters(), lr=s.lr, betas=(0.9, 0.99), weight_decay=0.0)
    policy, opt = accelerator.prepare(policy, opt)
    dev = accelerator.device
    ids, attn, cmask, advantages = ids.to(dev), attn.to(dev), cmask.to(dev), advantages.to(dev)

    def _no_grad_logprobs(model) -> torch.Tensor:
        out = []
        with torch.no_grad():
            for a in range(0, len(batch), s.micro_batch_size):
                sl = slice(a, a + s.micro_batch_size)
                out.append(completion_logprobs(model, ids[sl], attn[sl], P, s.temperature)[0])
        return torch.cat(out)  # (N, C) float32

    policy.eval()
    old_lp = _no_grad_logprobs(policy)  # computed once per pass (Shao et al. 2024, Alg. 1: pi_old)
    # The reference's log-probs are computed even with beta = 0: KL to the reference is a guard
    # metric the gate can halt on. With ref_dir None the starting policy is the reference.
    if ref_dir is None or Path(ref_dir).resolve() == Path(init_dir).resolve():
        ref_lp = old_lp
    else:
        ref = AutoModelForCausalLM.from_pretrained(ref_dir, dtype=getattr(torch, dtype)).to(dev).eval()
        ref_lp = _no_grad_logprobs(ref)
        del ref
    policy.train()
    rng = random.Random(s.seed)
    steps_per_epoch = math.ceil(len(batch) / s.mini_batch_size)
    total = steps_per_epoch * s.ppo_epochs
    step_metrics: list[dict] = []
    for _ in range(s.ppo_epochs):
        order = list(range(len(batch)))
        rng.shuffle(order)
        for k in range(steps_per_epoch):
            mini = order[k * s.mini_batch_size:(k + 1) * s.mini_batch_size]
            n_tok = float(cmask[mini].sum())
            acc: dict[str, float] = {}
            for a in range(0, len(mini), s.micro_batch_size):
                mb = torch.tensor(mini[a:a + s.micro_batch_size], device=dev)
                lp, ent = completion_logprobs(policy, ids[mb], attn[mb], P, s.temperature, with_entropy=True)
                loss, m = policy_loss(lp, old_lp[mb], advantages[mb], cmask[mb], loss_cfg,
                                      ref_logprobs=ref_lp[mb], entropy=ent,
                                      global_num_tokens=n_tok, world_size=1)
                # seq-mean modes average within the micro-batch: weight by its share of the mini-batch;
                # token-mean already divides by the mini-batch's token count.
                scale = 1.0 if loss_cfg.aggregation == "token-mean" else len(mb) / len(mini)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"GRPO loss is {loss.item()} at step {len(step_metrics)}; lower grpo.lr (now {s.lr}) "
                                             "— the incumbent is untouched and nothing was saved")
                accelerator.backward(loss * scale)
                for name, v in m.items():
                    acc[f"train/{name}"] = acc.get(f"train/{name}", 0.0) + float(v) * len(mb) / len(mini)
            gnorm = float(accelerator.clip_grad_norm_(policy.parameters(), s.max_grad_norm))
            if not math.isfinite(gnorm):
                raise FloatingPointError(f"gradient norm is {gnorm} at step {len(step_metrics)}; lower grpo.lr (now {s.lr}) "
                                         "— the incumbent is untouched and nothing was saved")
            opt.step()
            opt.zero_grad(set_to_none=True)
            acc["train/grad_norm"] = gnorm
            step_metrics.append(acc)
            if on_step:
                on_step(len(step_metrics), total, acc)
    out_dir = Path(out_dir)
    accelerator.unwrap_model(policy).save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    p90 = float(torch.quantile(lengths, 0.9)) if len(lengths) else 0.0
    summary = {**base, "train/completion_len_mean": float(lengths.mean()), "train/completion_len_p90": p90,
               **{k: sum(d[k] for d in step_metrics) / len(step_metrics) for k in step_metrics[0]}}
    return GRPOResult(out_dir, len(step_metrics), time.perf_counter() - t0, summary, step_metrics, kept)
