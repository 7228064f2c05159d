"""The GRPO learner: a policy, its AdamW and its ``Accelerator`` over a round's passes, and ``train_grpo``, one pass
from a checkpoint to a checkpoint.

A pass tokenizes the groups (``grpo.batch``), computes the old and reference log-probs once (``grpo.forward``), then
runs its optimizer steps (``grpo.step``); see the package's docstring for what each is.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ratchet.common.files import atomic_path
from ratchet.loop.config import GRPOConfig
from ratchet.loop.train.data_parallel import make_accelerator, rank_slice
from ratchet.loop.train.grpo.batch import GRPOSample, PackedRollouts, fit_message, group_advantages, pack_rollouts
from ratchet.loop.train.grpo.forward import no_grad_logprobs, rollout_module
from ratchet.loop.train.grpo.step import StepTensors, minibatch_plan, optimizer_step, pass_summary

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
    cmask = cmask & packed.model_token_mask(range(len(batch)), cmask.shape[1])  # an episode's environment tokens: no loss
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
    minis, mine, passes = minibatch_plan(packed, len(batch), s, run.seed, rank, world)
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
    tensors = StepTensors(
        cmask.to(dev), adv[kept].to(dev), old_lp, ref_lp, ref_is_old, old_sup, sampler, correction, sampled.to(dev)
    )
    step_metrics = [
        optimizer_step(accelerator, wrapped, learner.opt, mini, tensors, loss_cfg, s, len(minis), k, on_step)
        for k, mini in enumerate(minis)
    ]
    learner.passes += 1
    summary = pass_summary(base, lengths, packed, correction, step_metrics, world, time.perf_counter() - t0)
    rank_rows = sorted({kept[r] for m in minis for r in rank_slice(m, rank, world)})
    return GRPOResult(None, len(step_metrics), time.perf_counter() - t0, summary, step_metrics, kept, rank_rows)


def _correction(s: GRPOConfig, run: GRPORun) -> str:
    """The sampler correction of this pass: ``grpo.sampler_correction``, with "auto" -> "tis" unless the rollouts
    came from the learner's own module (``run.engine_shared``: then the gap is one forward's rounding, ~0)."""
    if s.sampler_correction == "auto":
        return "none" if run.engine_shared else "tis"
    return s.sampler_correction


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
