"""GRPO-family policy-gradient pass over a round's verified groups (GRPO, Dr. GRPO, DAPO, GSPO, RLOO).

The math lives in ``loop.advantages`` and ``loop.losses`` (checked against TRL's GRPOTrainer to
1e-5); this module only orchestrates: tokenize the groups, compute advantages, compute the old
log-probs once at the start of the pass (skipped when the pass is one optimizer step on fresh rollouts: then
pi_old = pi_theta and the old log-probs are the training forward's, detached, as TRL does with
``num_iterations = 1``) and the frozen reference's (when beta > 0, or when the KL guard is measured), then
``ppo_epochs`` passes of mini-batch updates with gradient accumulation and clipping, under
``accelerate`` so the same code runs on one CPU or many GPUs. Guard metrics are returned per
optimizer step; a NaN or inf aborts the pass before anything is saved.

It trains on the token ids the engine sampled (``loop.train.rollout_batch``) and, where the rollouts carry the
sampler's log-probs, measures per step how far they are from the trainer's (``train/sampler/*``) and corrects
the gap with truncated or masked importance sampling (``grpo.sampler_correction``; Yao et al. 2025).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ratchet.common.files import atomic_path
from ratchet.loop.config import GRPOConfig
from ratchet.loop.train.data_parallel import global_count, make_accelerator, micro_batches, rank_slice
from ratchet.loop.train.rollout_batch import (  # noqa: F401 - re-exported: the GRPO pass's inputs and forwards
    GRPOSample,
    PackedRollouts,
    _group_order,
    _tokenize,
    completion_logprobs,
    fit_message,
    no_grad_logprobs,
    pack_rollouts,
    rollout_logprobs,
    rollout_module,
)

logger = logging.getLogger(__name__)

StepFn = Callable[[int, int, dict], None]  # (step, total_steps, metrics)


@dataclass(frozen=True)
class GRPORun:
    """What a round adds to its ``GRPOConfig``: how the rollouts were sampled and cut, and the pass's seed.

    ``temperature`` is the rollouts' sampling temperature (log-probs are computed at the same one, as TRL does);
    ``max_completion_length`` (tokens) normalizes the Dr. GRPO loss; ``max_seq_len`` (tokens) bounds prompt + completion.
    ``measure_kl``: with ``beta = 0`` the reference's log-probs only feed the KL guard metric (``train/kl_last``);
    False skips that forward pass (a persistent round measures it on its last step, whose policy is the candidate
    the gate's guard judges). With ``beta > 0`` the reference is always evaluated.
    ``top_p``: the rollouts' nucleus; below 1 the trainer's log-probs are compared with the sampler's on the
    nucleus (``loop.train.mismatch.nucleus_logprobs``). ``engine_shared``: the rollouts were generated from the
    learner's own module (then the sampler and trainer log-probs are one forward apart and
    ``grpo.sampler_correction = "auto"`` corrects nothing).
    """

    temperature: float = 0.8
    max_completion_length: int = 32
    max_seq_len: int = 256
    seed: int = 0
    measure_kl: bool = True
    top_p: float = 1.0
    engine_shared: bool = False


@dataclass
class GRPOResult:
    checkpoint_dir: Path | None
    steps: int
    seconds: float
    metrics: dict = field(default_factory=dict)
    step_metrics: list[dict] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)  # indices of the samples that entered the loss
    rank_rows: list[int] = field(default_factory=list)  # indices of the samples this rank trained on (all of kept: one rank)


def group_advantages(samples: Sequence[GRPOSample], estimator: str, dynamic_sampling: bool):
    """Advantages per sample and the kept sample indices.

    Returns:
        advantages (N,) float32 aligned with ``samples``, kept indices (list[int]), zero-variance group count.
    Raises:
        ValueError: groups of unequal size, or G < 2.
    """
    import torch

    from ratchet.loop.train.advantages import compute_advantages, zero_variance_mask

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


def adamw(params, *, lr: float, betas: tuple[float, float], weight_decay: float):
    """``torch.optim.AdamW`` (Loshchilov & Hutter 2019) with the fused kernel where torch has one for these
    tensors (CPU and CUDA floating point), else the foreach one. Transformers' ``Trainer`` (so TRL) picks the
    fused kernel by default on torch >= 2.8. It computes the same update; results differ from the foreach
    kernel by rounding only (~1 ulp per step). On SmolLM2-135M on one CPU thread a step takes ~0.2 s
    against ~0.85 s for foreach.

    Raises:
        ValueError: bad ``lr`` / ``betas`` (torch's own checks).
    """
    import torch

    params = list(params)
    try:
        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay, fused=True)
    except RuntimeError:  # a device or dtype without the fused kernel
        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay)


def _load_policy(init_dir, s: GRPOConfig, dtype: str):
    """The trainable policy: full weights, or LoRA adapters (peft) on frozen weights; optional gradient checkpointing."""
    import torch
    from transformers import AutoModelForCausalLM

    from ratchet.loop.train.sft import with_lora

    policy = AutoModelForCausalLM.from_pretrained(init_dir, dtype=getattr(torch, dtype))
    return with_lora(policy, s.lora_r, s.lora_alpha, s.lora_target_modules, s.gradient_checkpointing, key="grpo.lora_r")


def train_grpo(
    init_dir: str | Path,
    samples: Sequence[GRPOSample],
    out_dir: str | Path,
    s: GRPOConfig,
    run: GRPORun = GRPORun(),
    *,
    ref_dir: str | Path | None = None,
    dtype: str = "float32",
    on_step: StepFn | None = None,
    optimizer_state: str | Path | None = None,
) -> GRPOResult:
    """One GRPO-family pass from the checkpoint at ``init_dir``; saves the policy to ``out_dir``.

    ``optimizer_state``: a file holding AdamW's moments between passes. When it exists it is loaded
    (on-policy steps of one round continue one optimizer, as TRL and verl do across steps); the
    pass writes it back (atomically) after saving the policy. With LoRA the adapters are merged before saving, so every checkpoint is a plain model directory.
    Returns ``checkpoint_dir=None`` (nothing saved) when dynamic sampling leaves no group with signal.
    A ``GRPOLearner`` does the same over many passes with the policy kept in memory.

    Data parallel (``accelerate launch --num_processes R``): every rank gets the same ``samples`` and trains on
    its disjoint slice of each mini-batch (``loop.data_parallel.rank_slice``; ``GRPOResult.rank_rows`` lists
    them); DDP averages the gradients. Each rank's loss is its partial sum over the GLOBAL denominator times R
    (the active-token count for token-mean, the sequence count for the sequence-level aggregations,
    all-reduced before the backward), so the averaged gradient equals the one-process gradient of the whole
    mini-batch: see ``loop.data_parallel`` for the derivation. Old and reference log-probs are computed only
    for the rows a rank trains on.

    Raises:
        ValueError: bad groups or settings. FloatingPointError: a NaN/inf loss or gradient norm.
        ImportError: ``lora_r > 0`` without peft installed.
    """
    t0 = time.perf_counter()
    _, kept, _ = group_advantages(samples, s.advantage, s.dynamic_sampling)
    if not kept:  # no group with signal: no model is even loaded
        return GRPOLearner.summary_only(samples, s)
    learner = GRPOLearner(init_dir, s, ref_dir=ref_dir, dtype=dtype, optimizer_state=optimizer_state)
    res = learner.train_pass(samples, run, on_step=on_step)
    res.checkpoint_dir = learner.save(out_dir, optimizer_state)
    res.seconds = res.metrics["train/seconds"] = time.perf_counter() - t0  # model load and save included
    return res


class GRPOLearner:
    """A policy, its AdamW and its ``Accelerator`` kept in memory over a round's on-policy passes.

    ``train_pass`` runs one pass (as ``train_grpo`` does) without writing anything; ``state_dict`` gives the
    updated weights for a generation engine's ``update_weights``; ``save`` writes the round's candidate.
    The reference for the KL metric / penalty is ``ref_dir`` (default: the starting checkpoint), loaded once.
    """

    def __init__(
        self,
        init_dir: str | Path,
        s: GRPOConfig,
        *,
        ref_dir: str | Path | None = None,
        dtype: str = "float32",
        optimizer_state: str | Path | None = None,
    ) -> None:
        import torch
        from transformers import AutoTokenizer

        self.s, self.dtype, self.init_dir = s, dtype, Path(init_dir)
        self.ref_dir = Path(ref_dir) if ref_dir is not None else self.init_dir
        self.accelerator = make_accelerator()
        self.fsdp = self.accelerator.distributed_type.name == "FSDP"
        if self.fsdp and s.lora_r:
            raise ValueError(
                f"grpo.lora_r ({s.lora_r}) > 0 with compute.fsdp: LoRA adapters are not sharded; set one of them off"
            )
        self.tok = AutoTokenizer.from_pretrained(init_dir)
        policy = _load_policy(init_dir, s, dtype)
        opt = adamw([p for p in policy.parameters() if p.requires_grad], lr=s.lr, betas=(0.9, 0.99), weight_decay=0.0)
        if optimizer_state is not None and not s.lora_r and Path(optimizer_state).is_file():
            opt.load_state_dict(torch.load(optimizer_state, weights_only=True))
            for group in opt.param_groups:
                group["lr"] = s.lr
        self.wrapped, self.opt = self.accelerator.prepare(rollout_module(policy), opt)
        self.passes, self._ref = 0, None

    @staticmethod
    def summary_only(samples: Sequence[GRPOSample], s: GRPOConfig) -> GRPOResult:
        """The result of a pass whose groups carry no signal (nothing trained, nothing saved)."""
        import torch

        _, kept, zero_groups = group_advantages(samples, s.advantage, s.dynamic_sampling)
        base = {
            "train/reward_mean": float(sum(x.reward for x in samples) / len(samples)),
            "train/reward_std": float(torch.tensor([x.reward for x in samples]).std(unbiased=False)),
            "train/zero_variance_frac": zero_groups / len({x.group for x in samples}),
            "train/sequences": len(kept),
        }
        return GRPOResult(None, 0, 0.0, base, [], kept)

    def _reference(self):
        """The reference policy's log-prob module (loaded once), or None while the policy still is the reference."""
        import torch
        from transformers import AutoModelForCausalLM

        if self.passes == 0 and self.ref_dir.resolve() == self.init_dir.resolve():
            return None
        if self._ref is None:
            ref = AutoModelForCausalLM.from_pretrained(self.ref_dir, dtype=getattr(torch, self.dtype))
            self._ref = rollout_module(ref.to(self.accelerator.device).eval())
        return self._ref

    def policy_module(self):
        """The policy's own ``PreTrainedModel`` (its parameters are the ones AdamW updates), for an engine in the
        same process to generate from without a copy; None with LoRA (a PEFT wrapper) or FSDP (sharded)."""
        if self.s.lora_r or self.fsdp:
            return None
        return self.accelerator.unwrap_model(self.wrapped).policy

    def state_dict(self) -> dict:
        """The current policy weights (Hugging Face names -> tensors) for ``backend.update_weights``; with LoRA the
        adapters merged into a copy (``merged_lora_state``), the learner's own weights left as they are. With FSDP
        the shards are all-gathered into full tensors on every rank (``full_state_dict``): a collective, so every
        rank calls it after the same pass."""
        from ratchet.loop.train.data_parallel import full_state_dict
        from ratchet.loop.train.sft import merged_lora_state

        if self.fsdp:
            return full_state_dict(self.wrapped, prefix="policy.")
        policy = self.accelerator.unwrap_model(self.wrapped).policy
        return merged_lora_state(policy) if self.s.lora_r else policy.state_dict()

    def save(self, out_dir: str | Path, optimizer_state: str | Path | None = None) -> Path:
        """Write the policy (LoRA merged; the learner is spent after that with LoRA) and optionally AdamW's moments."""
        if self.s.lora_r:  # adapters are merged at every save and start fresh (B = 0) each pass: no moments to carry
            optimizer_state = None
        _save_policy(self.accelerator, self.wrapped, self.tok, Path(out_dir), self.s, self.opt, optimizer_state)
        return Path(out_dir)

    def train_pass(self, samples: Sequence[GRPOSample], run: GRPORun = GRPORun(), on_step: StepFn | None = None) -> GRPOResult:
        """One pass over ``samples`` (see ``train_grpo``); nothing is written. ``checkpoint_dir`` is None."""
        return _train_pass(self, samples, run, on_step)


def _minibatch_plan(packed, n: int, s, seed: int, rank: int, world: int) -> tuple[list[list[int]], list[int], int]:
    """Every epoch's mini-batches up front (the same on every rank: one seeded rng), this rank's rows and the
    number of micro-batch passes every rank makes (the largest share's; FSDP needs equal call counts)."""
    rng = random.Random(seed)
    orders = [_group_order(packed, n, rng) for _ in range(s.ppo_epochs)]
    minis = [o[k : k + s.mini_batch_size] for o in orders for k in range(0, len(o), s.mini_batch_size)]
    shares = [sorted({r for m in minis for r in rank_slice(m, q, world)} | {m[0] for m in minis}) for q in range(world)]
    return minis, shares[rank], max(math.ceil(len(x) / s.micro_batch_size) for x in shares)


def _pass_summary(base: dict, lengths, packed, correction: str, step_metrics: list[dict], world: int, seconds: float) -> dict:
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


def _train_pass(learner: GRPOLearner, samples: Sequence[GRPOSample], run: GRPORun, on_step: StepFn | None) -> GRPOResult:
    import torch

    from ratchet.loop.train.losses import PolicyLossConfig, mask_truncated

    s, accelerator, wrapped = learner.s, learner.accelerator, learner.wrapped
    t0 = time.perf_counter()
    torch.manual_seed(run.seed)
    res = GRPOLearner.summary_only(samples, s)
    adv, kept, base = group_advantages(samples, s.advantage, s.dynamic_sampling)[0], res.kept, res.metrics
    if not kept:
        return res
    loss_cfg = PolicyLossConfig.from_trl(
        s.loss_type,
        epsilon_low=s.epsilon_low,
        epsilon_high=s.epsilon_high,
        importance_sampling_level=s.importance_sampling_level,
        beta=s.beta,
        kl_estimator=s.kl_estimator,
        max_completion_length=run.max_completion_length,
    )
    batch = [samples[i] for i in kept]
    packed = pack_rollouts(learner.tok, batch, run.max_seq_len)
    _say_what_was_packed(packed, len(batch), run.max_seq_len)
    _, cmask = packed.completion_tensors(range(len(batch)))  # (N, C) bool
    sampled = cmask  # every sampled token: where the sampler/trainer gap is measured, loss or not
    lengths = cmask.sum(-1).float()  # (N,) completion lengths, tokens
    if s.mask_truncated:  # DAPO overlong filtering: truncated completions carry no loss
        cmask = mask_truncated(cmask, torch.tensor([x.truncated for x in batch]))
    data = (packed, run.temperature, s.shared_prompt and not s.gradient_checkpointing, cmask.shape[1], run.top_p)
    inner = accelerator.unwrap_model(wrapped)
    inner.data = data
    dev = accelerator.device
    rank, world = accelerator.process_index, accelerator.num_processes
    # Every epoch's order up front (the same on every rank: one seeded rng), so each rank knows its rows.
    minis, mine, passes = _minibatch_plan(packed, len(batch), s, run.seed, rank, world)
    shape = (len(batch), cmask.shape[1])
    logprobs_of = functools.partial(no_grad_logprobs, shape=shape, mine=mine, passes=passes, micro=s.micro_batch_size, nucleus=run.top_p < 1, device=dev)  # fmt: skip

    no_sync_model = wrapped if learner.fsdp else inner  # no DDP collectives for the no-grad passes
    no_sync_model.eval()
    # pi_old (Shao et al. 2024, Alg. 1): computed once per pass; with one optimizer step per pass it is the
    # policy of the training forward itself, so that forward's detached log-probs serve (TRL, num_iterations = 1).
    old_lp, old_sup = (None, None) if len(minis) == 1 else logprobs_of(no_sync_model)
    # With beta = 0 the reference's log-probs feed only the KL guard metric the gate can halt on
    # (run.measure_kl); while the policy still is the reference, they are the old log-probs.
    want_ref = s.beta > 0 or run.measure_kl
    ref = learner._reference() if want_ref else None
    if ref is not None:
        ref.data = data
    ref_lp = logprobs_of(ref)[0] if ref is not None else None
    ref_is_old = want_ref and ref is None
    wrapped.train()
    sampler = packed.sampler_tensor(range(len(batch)), cmask.shape[1]).to(dev) if packed.sampler_lp else None
    correction = _correction(s, run)
    tensors = _StepTensors(
        cmask.to(dev), adv[kept].to(dev), old_lp, ref_lp, ref_is_old, old_sup, sampler, correction, sampled.to(dev)
    )
    step_metrics = [
        _optimizer_step(accelerator, wrapped, learner.opt, mini, tensors, loss_cfg, s, len(minis), k, on_step)
        for k, mini in enumerate(minis)
    ]
    learner.passes += 1
    summary = _pass_summary(base, lengths, packed, correction, step_metrics, world, time.perf_counter() - t0)
    rank_rows = sorted({kept[r] for m in minis for r in rank_slice(m, rank, world)})
    return GRPOResult(None, len(step_metrics), time.perf_counter() - t0, summary, step_metrics, kept, rank_rows)


@dataclass(frozen=True)
class _StepTensors:
    cmask: object  # (N, C) bool: completion tokens that carry loss
    advantages: object  # (N,) float32
    old_lp: object  # (N, C) float32, or None: the training forward's detached log-probs (one step per pass)
    ref_lp: object  # (N, C) float32, or None: the old log-probs (ref_is_old) or not measured
    ref_is_old: bool = False  # the policy still is the reference: KL is 0 against the old log-probs
    old_sup: object = None  # (N, C) float32, or None: old log-probs on the sampler's support (top_p < 1)
    sampler: object = None  # (N, C) float32 NaN-padded sampler log-probs, or None: none stored
    correction: str = "none"  # "tis" | "mis" | "none" (``_correction``)
    sampled: object = None  # (N, C) bool: every sampled completion token (truncated completions' too)


def _correction(s: GRPOConfig, run: GRPORun) -> str:
    """The sampler correction of this pass: ``grpo.sampler_correction``, with "auto" -> "tis" unless the rollouts
    came from the learner's own module (``run.engine_shared``: then the gap is one forward's rounding, ~0)."""
    if s.sampler_correction == "auto":
        return "none" if run.engine_shared else "tis"
    return s.sampler_correction


def _reduce(name: str, values: list[float]) -> float:
    """Combine a metric over steps or weighted micro-batch shares: the extreme for *_max / *_min, else the sum/mean."""
    return max(values) if name.endswith("_max") else min(values) if name.endswith("_min") else sum(values) / len(values)


def _say_what_was_packed(packed: PackedRollouts, n: int, max_seq_len: int) -> None:
    """One log line each for what ``pack_rollouts`` had to cut, re-tokenize, or found changed since sampling."""
    if msg := fit_message(packed, n, max_seq_len):
        logger.warning(msg)
    if packed.retokenized:
        logger.info(
            "%d of %d rollouts come from an older store without token ids: their text was re-tokenized", packed.retokenized, n
        )
    if packed.prompt_mismatches:
        logger.warning(
            "%d of %d rollouts' prompts tokenize differently now than when sampled (chat template or tokenizer changed)",
            packed.prompt_mismatches,
            n,
        )


def _optimizer_step(accelerator, wrapped, opt, mini: list[int], t: _StepTensors, loss_cfg, s: GRPOConfig, total, k, on_step):
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


def _step_gap(accelerator, gap_rows: list, t: _StepTensors) -> dict:
    """``sampler_mismatch`` over one optimizer step's rows: this rank's, gathered from every rank when there are several."""
    import torch

    from ratchet.loop.train.mismatch import sampler_mismatch

    idx = torch.cat([r for r, _ in gap_rows]) if gap_rows else torch.zeros(0, dtype=torch.long, device=t.cmask.device)
    lp = torch.cat([x for _, x in gap_rows]) if gap_rows else torch.zeros((0, t.cmask.shape[1]), device=t.cmask.device)
    parts = [lp.float(), t.sampler[idx], t.sampled[idx]]
    if accelerator.num_processes > 1:  # padded rows carry mask 0: inactive
        parts = [accelerator.gather(accelerator.pad_across_processes(x, dim=0)) for x in parts]
    return sampler_mismatch(*parts)


def _save_policy(accelerator, wrapped, tok, out_dir: Path, s: GRPOConfig, opt, optimizer_state) -> None:
    """Rank 0 writes the policy (LoRA merged) and the optimizer moments; every rank takes part in gathering them."""
    import torch

    state = None
    if accelerator.distributed_type.name == "FSDP":  # a collective: the full state dict gathered on rank 0
        state = {k.removeprefix("policy."): v for k, v in accelerator.get_state_dict(wrapped).items()}
    final = accelerator.unwrap_model(wrapped).policy
    if s.lora_r:
        final = final.merge_and_unload()
    if s.gradient_checkpointing:
        final.gradient_checkpointing_disable()
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:  # one writer under `accelerate launch` (every rank holds the same weights)
        final.save_pretrained(out_dir, state_dict=state)
        tok.save_pretrained(out_dir)
        if optimizer_state is not None:
            with atomic_path(optimizer_state) as tmp:
                torch.save(opt.state_dict(), tmp)
    accelerator.wait_for_everyone()
