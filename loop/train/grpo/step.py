"""One optimizer step of a GRPO pass, the pass's mini-batch plan, and its summary over steps.

``minibatch_plan`` lays out every epoch's mini-batches up front (the same on every rank), ``optimizer_step`` runs one
of them with gradient accumulation (this rank's share; the loss scaled so DDP's averaged gradient is the
one-process gradient, see ``loop.train.data_parallel``) and ``pass_summary`` reduces the steps' metrics.
"""

from __future__ import annotations

import contextlib
import math
import random
from dataclasses import dataclass

from ratchet.loop.config import GRPOConfig
from ratchet.loop.train.data_parallel import global_count, micro_batches, rank_slice
from ratchet.loop.train.grpo.batch import PackedRollouts


def _group_order(packed: PackedRollouts, n: int, rng: random.Random) -> list[int]:
    """Row indices shuffled by prompt (a group's completions stay adjacent, so micro-batches share prompts)."""
    by_prompt: dict[int, list[int]] = {}
    for i in range(n):
        by_prompt.setdefault(packed.prompt_row[i], []).append(i)
    groups = list(by_prompt.values())
    rng.shuffle(groups)
    return [i for g in groups for i in g]


def minibatch_plan(packed, n: int, s, seed: int, rank: int, world: int) -> tuple[list[list[int]], list[int], int]:
    """Every epoch's mini-batches up front (the same on every rank: one seeded rng), this rank's rows and the
    number of micro-batch passes every rank makes (the largest share's; FSDP needs equal call counts)."""
    rng = random.Random(seed)
    orders = [_group_order(packed, n, rng) for _ in range(s.ppo_epochs)]
    minis = [o[k : k + s.mini_batch_size] for o in orders for k in range(0, len(o), s.mini_batch_size)]
    shares = [sorted({r for m in minis for r in rank_slice(m, q, world)} | {m[0] for m in minis}) for q in range(world)]
    return minis, shares[rank], max(math.ceil(len(x) / s.micro_batch_size) for x in shares)


@dataclass(frozen=True)
class StepTensors:
    """The pass's tensors one optimizer step reads (rows indexed as in the packed rollouts)."""

    cmask: object  # (N, C) bool: completion tokens that carry loss
    advantages: object  # (N,) float32
    old_lp: object  # (N, C) float32, or None: the training forward's detached log-probs (one step per pass)
    ref_lp: object  # (N, C) float32, or None: the old log-probs (ref_is_old) or not measured
    ref_is_old: bool = False  # the policy still is the reference: KL is 0 against the old log-probs
    old_sup: object = None  # (N, C) float32, or None: old log-probs on the sampler's support (top_p < 1)
    sampler: object = None  # (N, C) float32 NaN-padded sampler log-probs, or None: none stored
    correction: str = "none"  # "tis" | "mis" | "none" (the learner's ``_correction``)
    sampled: object = None  # (N, C) bool: every sampled completion token (truncated completions' too)


def optimizer_step(accelerator, wrapped, opt, mini: list[int], t: StepTensors, loss_cfg, s: GRPOConfig, total, k, on_step):
    """One optimizer step over the global mini-batch ``mini`` (this rank's share of it), with gradient accumulation.

    Returns the step's metrics (the mini-batch's, summed over ranks with each row weighted 1/len(mini)).
    """
    import torch

    from ratchet.loop.train.losses import policy_loss, sampler_correction_weights

    dev = accelerator.device
    rank, world = accelerator.process_index, accelerator.num_processes
    micros = micro_batches(mini, rank, world, s.micro_batch_size)
    n_tok = global_count(accelerator, float(t.cmask[rank_slice(mini, rank, world)].sum()))  # global active tokens
    n_seq = len(mini)  # global sequences (every rank holds the whole mini-batch's row list)
    acc: dict[str, float] = {}
    gap_rows: list | None = [] if t.sampler is not None else None  # (row indices, pi_old on the sampler's support)
    for j, rows in enumerate(micros):
        weight = 1.0 if rows else 0.0  # an empty micro-batch: a zero-weight pass over a real row (see data_parallel)
        rows = rows or mini[:1]
        mb = torch.tensor(rows, device=dev)
        sync = accelerator.no_sync(wrapped) if j < len(micros) - 1 else contextlib.nullcontext()
        with sync:
            lp, ent, sup = wrapped(rows, with_entropy=True)
            old = t.old_lp[mb] if t.old_lp is not None else lp.detach()
            ref = t.ref_lp[mb] if t.ref_lp is not None else (old if t.ref_is_old else None)
            weights = old_on_support = None
            if t.sampler is not None:  # pi_old on the sampler's support against what the sampler reported
                old_on_support = (t.old_sup[mb] if t.old_sup is not None else sup) if sup is not None else old
                active = t.cmask[mb] & (weight > 0)
                weights = sampler_correction_weights(t.correction, old_on_support, t.sampler[mb], active, s.sampler_is_cap)
            loss, m = policy_loss(
                lp,
                old,
                t.advantages[mb],
                t.cmask[mb] & (weight > 0),
                loss_cfg,
                ref_logprobs=ref,
                entropy=ent,
                global_num_tokens=n_tok,
                world_size=world,
                is_weights=weights,
            )
            # token-mean divides by n_tok / world inside policy_loss; the sequence-level modes average over the
            # micro-batch's rows: rescale that mean to (row sum) * world / (global sequences).
            scale = weight if loss_cfg.aggregation == "token-mean" else weight * len(rows) * world / n_seq
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"GRPO loss is {loss.item()} at step {k}; lower grpo.lr (now {s.lr}) "
                    "— the incumbent is untouched and nothing was saved"
                )
            accelerator.backward(loss * scale)
        for name, v in m.items():
            acc[f"train/{name}"] = acc.get(f"train/{name}", 0.0) + (float(v) * len(rows) / n_seq if weight else 0.0)
        if gap_rows is not None and weight:
            gap_rows.append((mb, old_on_support))
    if world > 1:  # the mini-batch's metrics: every rank's weighted share summed
        names = sorted(acc)
        summed = accelerator.reduce(torch.tensor([acc[n] for n in names], dtype=torch.float64, device=dev), reduction="sum")
        acc = dict(zip(names, summed.tolist()))
    if gap_rows is not None:  # over the whole mini-batch (every rank's rows gathered), so maxima and spreads are exact
        acc.update({f"train/{k}": float(v) for k, v in _step_gap(accelerator, gap_rows, t).items()})
    params = [p for p in wrapped.parameters() if p.requires_grad]
    gnorm = float(accelerator.clip_grad_norm_(params, s.max_grad_norm))
    if not math.isfinite(gnorm):
        raise FloatingPointError(
            f"gradient norm is {gnorm} at step {k}; lower grpo.lr (now {s.lr}) — the incumbent is untouched and nothing was saved"
        )
    opt.step()
    opt.zero_grad(set_to_none=True)
    acc["train/grad_norm"] = gnorm
    if on_step:
        on_step(k + 1, total, acc)
    return acc


def _step_gap(accelerator, gap_rows: list, t: StepTensors) -> dict:
    """``sampler_mismatch`` over one optimizer step's rows: this rank's, gathered from every rank when there are several."""
    import torch

    from ratchet.loop.train.mismatch import sampler_mismatch

    idx = torch.cat([r for r, _ in gap_rows]) if gap_rows else torch.zeros(0, dtype=torch.long, device=t.cmask.device)
    lp = torch.cat([x for _, x in gap_rows]) if gap_rows else torch.zeros((0, t.cmask.shape[1]), device=t.cmask.device)
    parts = [lp.float(), t.sampler[idx], t.sampled[idx]]
    if accelerator.num_processes > 1:  # padded rows carry mask 0: inactive
        parts = [accelerator.gather(accelerator.pad_across_processes(x, dim=0)) for x in parts]
    return sampler_mismatch(*parts)


def pass_summary(base: dict, lengths, packed, correction: str, step_metrics: list[dict], world: int, seconds: float) -> dict:
    """A training pass's metrics: the rollouts' (``base``), the packing's, each step's reduced, and the guards'."""
    import torch

    p90 = float(torch.quantile(lengths, 0.9)) if len(lengths) else 0.0
    last = step_metrics[-1]
    return {
        **base,
        "train/completion_len_mean": float(lengths.mean()),
        "train/completion_len_p90": p90,
        "train/truncated_prompts": packed.truncated_prompts,
        "train/truncated_completions": packed.truncated_completions,
        "train/longest_sequence": packed.longest_sequence,
        "train/retokenized": packed.retokenized,
        "train/unread_token_share": packed.unread_tokens / max(packed.sampled_tokens, 1),
        "train/prompt_hash_mismatches": packed.prompt_mismatches,
        "train/sampler_correction": correction,
        **{k: _reduce(k, [d[k] for d in step_metrics]) for k in step_metrics[0]},
        # what the gate's guards read: where the policy ended up, not the pass average
        **({"train/kl_last": last["train/kl/is_mean"]} if "train/kl/is_mean" in last else {}),  # absent: not measured
        "train/entropy_last": last.get("train/entropy/mean", 0.0),
        # the sampler/trainer gap where the policy ended up (absent: the rollouts carry no sampler log-probs)
        **({"train/sampler_gap_last": last["train/sampler/logp_diff_mean"]} if "train/sampler/logp_diff_mean" in last else {}),
        "train/seconds": seconds,
        "train/ranks": world,
    }


def _reduce(name: str, values: list[float]) -> float:
    """Combine a metric over steps or weighted micro-batch shares: the extreme for *_max / *_min, else the sum/mean."""
    return max(values) if name.endswith("_max") else min(values) if name.endswith("_min") else sum(values) / len(values)
