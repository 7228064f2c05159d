"""The GRPO-family policy loss as small pure functions: log-probs, importance ratios, clipped
surrogate, KL estimators, loss aggregation, overlong handling and the metrics a trainer logs.

Shapes: ``B`` sequences (completions), ``T`` completion tokens (right-padded), ``V`` vocabulary.
Every per-token tensor is ``(B, T) float32``; ``mask`` is ``(B, T)`` bool (or 0/1) and is True on
completion tokens that carry loss. Values of log-prob tensors at masked positions are ignored (they
are zeroed first), so padding can hold anything finite or not.

``policy_loss`` is the entry point; with ``PolicyLossConfig.from_trl(loss_type, ...)`` it reproduces
TRL 1.16 ``GRPOTrainer._compute_loss`` for ``loss_type`` "grpo", "dapo" and "dr_grpo" and for
``importance_sampling_level`` "token" and "sequence" (tests/loop/train/test_trl_parity.py checks loss and
gradient against TRL's own code path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import torch

Aggregation = Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"]
ImportanceLevel = Literal["token", "sequence", "sequence_token"]
KLEstimator = Literal["k1", "k2", "k3"]
KLPlacement = Literal["loss", "reward"]
SamplerCorrection = Literal["tis", "mis", "none"]  # see sampler_correction_weights

# TRL ``GRPOConfig.loss_type`` -> our aggregation mode (single process, no gradient accumulation).
TRL_LOSS_TYPES: dict[str, Aggregation] = {
    "grpo": "seq-mean-token-mean",
    "dapo": "token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
}


# --------------------------------------------------------------------------------------------------
# log-probs and entropy from logits


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log pi(token | prefix) for each position, computed in float32 whatever the model's dtype.

    log p_t = z_t[y_t] / tau - logsumexp_v(z_t[v] / tau), with z the logits and tau the sampling
    temperature (as TRL's ``selective_log_softmax`` / fused LM head: the loss must score the
    distribution the completions were sampled from).

    Args:
        logits: (B, T, V) any float dtype; ``logits[:, t]`` must predict ``token_ids[:, t]``. For a
            causal LM run on ``[prompt; completion]`` (prompt length P) that is
            ``model_logits[:, P - 1 : -1]``.
        token_ids: (B, T) int64.
        temperature: > 0; the logits are divided by it.

    Returns:
        (B, T) float32 log-probabilities (<= 0); float64 for float64 logits (the exactness tests run in float64).

    Raises:
        ValueError: non-positive temperature or mismatched shapes.
    """
    if temperature <= 0:
        raise ValueError(f"temperature ({temperature}) must be > 0; use the sampling temperature (1.0 for plain sampling)")
    if logits.shape[:-1] != token_ids.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and token_ids {tuple(token_ids.shape)} disagree on (B, T); "
            "slice the logits to the completion positions first"
        )
    z = (logits if logits.dtype == torch.float64 else logits.float()) / temperature  # (B, T, V) float32 (float64 kept)
    picked = torch.gather(z, dim=-1, index=token_ids.unsqueeze(-1)).squeeze(-1)  # (B, T)
    return picked - torch.logsumexp(z, dim=-1)  # (B, T)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Shannon entropy (nats) of the next-token distribution at each position, in float32.

    H_t = -sum_v p_v log p_v = logsumexp(z) - sum_v softmax(z)_v z_v, z = logits / tau.

    Args:
        logits: (B, T, V) any float dtype.
        temperature: > 0.

    Returns:
        (B, T) float32, in [0, log V].
    """
    if temperature <= 0:
        raise ValueError(f"temperature ({temperature}) must be > 0; use the sampling temperature")
    z = logits.float() / temperature  # (B, T, V)
    return torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(-1)  # (B, T)


# --------------------------------------------------------------------------------------------------
# masking helpers


def _as_bool(mask: torch.Tensor) -> torch.Tensor:
    return mask if mask.dtype == torch.bool else mask != 0


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over active tokens; a ``(B, 1)`` per-sequence ``x`` is averaged over its B rows.

    Args:
        x: (B, T) or (B, 1) float.
        mask: (B, T) bool or 0/1.

    Returns:
        0-d float32 (0 when nothing is active).
    """
    if x.shape[1] == 1 and mask.shape[1] != 1:  # one value per sequence (sequence-level ratio)
        return x.float().mean()
    m = _as_bool(mask)
    return torch.where(m, x, 0.0).sum() / m.sum().clamp(min=1)


# --------------------------------------------------------------------------------------------------
# importance ratio and clipped surrogate


def log_importance_weights(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor, level: ImportanceLevel = "token"
) -> torch.Tensor:
    """log of the importance ratio pi_theta / pi_old, per token or per sequence.

    - "token" (PPO/GRPO): log w_{i,t} = log pi(y_t) - log pi_old(y_t); shape (B, T).
    - "sequence" (GSPO, Zheng et al. 2025, eq. 7): log s_i = 1/|y_i| sum_t (log pi - log pi_old),
      the length-normalised sequence ratio; shape (B, 1), broadcast over tokens by the loss, so each
      token's gradient is s_i * grad log pi(y_t) / |y_i| (TRL ``importance_sampling_level="sequence"``).
    - "sequence_token" (GSPO-token, eq. 13): s_{i,t} = sg[s_i] * pi(y_t) / sg[pi(y_t)]; shape (B, T).
      Same value as s_i; per-token gradient s_i * grad log pi(y_t), which with a per-token mean over
      the sequence equals GSPO's gradient, and lets per-token advantages be used.

    Args:
        logprobs: (B, T) float32, requires grad.
        old_logprobs: (B, T) float32, no grad (the sampling-time policy).
        mask: (B, T) bool or 0/1.
        level: "token", "sequence" or "sequence_token".

    Returns:
        (B, T) float32 for "token" and "sequence_token", (B, 1) for "sequence".

    Raises:
        ValueError: unknown ``level`` (lists the valid ones).
    """
    m = _as_bool(mask)
    log_ratio = torch.where(m, logprobs - old_logprobs, 0.0)  # (B, T)
    if level == "token":
        return log_ratio
    seq = log_ratio.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1)  # (B, 1)
    if level == "sequence":
        return seq
    if level == "sequence_token":
        return seq.detach() + logprobs - logprobs.detach()  # (B, T); value log s_i, grad of log pi(y_t)
    raise ValueError(f"unknown importance_sampling_level {level!r}; valid: {list(get_args(ImportanceLevel))}")


def clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, epsilon_low: float, epsilon_high: float) -> torch.Tensor:
    """Per-token PPO clipped surrogate loss with separate lower and upper clip ranges.

    L_{i,t} = -min(w A, clip(w, 1 - eps_low, 1 + eps_high) A)   (Schulman et al. 2017, PPO eq. 7;
    decoupled ranges = DAPO "clip-higher", Yu et al. 2025, eq. 10, recommended eps_low 0.2, eps_high 0.28).

    Args:
        ratio: (B, T) or (B, 1) float32 importance ratio w = exp(log_importance_weights).
        advantages: (B, 1) or (B, T) float32.
        epsilon_low, epsilon_high: >= 0.

    Returns:
        float32 broadcast of ``ratio`` and ``advantages`` ((B, T) or (B, 1)); masked positions are not zeroed.
    """
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    return -torch.min(ratio * advantages, clipped * advantages)


def clip_fractions(
    ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, epsilon_low: float, epsilon_high: float
) -> dict[str, torch.Tensor]:
    """Share of active tokens whose gradient the clip removed (TRL's ``clip_ratio/*_mean``).

    low: w < 1 - eps_low with A < 0; high: w > 1 + eps_high with A > 0; region: either.

    Args:
        ratio: (B, T) or (B, 1) float32.
        advantages: (B, 1) or (B, T) float32.
        mask: (B, T) bool or 0/1.

    Returns:
        {"clip/low_frac", "clip/high_frac", "clip/region_frac"}: 0-d float32 in [0, 1], detached.
    """
    with torch.no_grad():
        low = ((ratio < 1 - epsilon_low) & (advantages < 0)).float()
        high = ((ratio > 1 + epsilon_high) & (advantages > 0)).float()
        return {
            "clip/low_frac": masked_mean(low, mask),
            "clip/high_frac": masked_mean(high, mask),
            "clip/region_frac": masked_mean(torch.maximum(low, high), mask),
        }


# --------------------------------------------------------------------------------------------------
# KL to the reference policy


def kl_divergence(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KLEstimator = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi_theta || pi_ref) from tokens sampled from pi_theta.

    With log r = log pi_ref(y_t) - log pi_theta(y_t) (Schulman 2020, "Approximating KL Divergence"):
      k1 = -log r                    unbiased, high variance, can be negative;
      k2 = (log r)^2 / 2             biased, low variance, >= 0;
      k3 = (r - 1) - log r           unbiased, low variance, >= 0 (GRPO, Shao et al. 2024, eq. 4;
                                     TRL's ``per_token_kl``).

    Args:
        logprobs: (B, T) float32 (policy, may require grad).
        ref_logprobs: (B, T) float32 (reference, no grad).
        estimator: "k1", "k2" or "k3".

    Returns:
        (B, T) float32; masked positions are not zeroed.

    Raises:
        ValueError: unknown ``estimator`` (lists the valid ones).
    """
    log_r = ref_logprobs - logprobs  # (B, T)
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r**2
    if estimator == "k3":
        return torch.exp(log_r) - log_r - 1
    raise ValueError(f"unknown kl_estimator {estimator!r}; valid: {list(get_args(KLEstimator))}")


def kl_penalized_rewards(
    rewards: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
    estimator: KLEstimator = "k1",
) -> torch.Tensor:
    """KL placed in the reward instead of the loss: r_i - beta * sum_t KL_t (Ouyang et al. 2022, eq. 2;
    Ziegler et al. 2019). Compute advantages from the result; the loss then has no KL term.

    Args:
        rewards: (B,) float32, one per completion.
        logprobs: (B, T) float32 under the sampling policy; ref_logprobs: (B, T) float32.
        mask: (B, T) bool or 0/1.
        beta: KL coefficient >= 0.
        estimator: "k1" (the classic RLHF choice), "k2" or "k3".

    Returns:
        (B,) float32, detached (the reward is a constant for the policy gradient).
    """
    with torch.no_grad():
        kl = torch.where(_as_bool(mask), kl_divergence(logprobs, ref_logprobs, estimator), 0.0)  # (B, T)
        return rewards.float() - beta * kl.sum(-1)  # (B,)


# --------------------------------------------------------------------------------------------------
# overlong completions (DAPO §3.4)


def mask_truncated(mask: torch.Tensor, is_truncated: torch.Tensor) -> torch.Tensor:
    """Overlong filtering: a completion cut at the length limit gets zero loss mask (DAPO §3.4;
    TRL ``mask_truncated_completions``), so a truncated answer is not punished as if wrong.

    Args:
        mask: (B, T) bool or 0/1.
        is_truncated: (B,) bool, True where generation hit the token limit without EOS.

    Returns:
        (B, T) bool.
    """
    return _as_bool(mask) & ~is_truncated.bool().unsqueeze(1)  # (B, T)


def soft_overlong_punishment(lengths: torch.Tensor, max_completion_length: int, cache_length: int) -> torch.Tensor:
    """DAPO's length-aware penalty, added to the reward (Yu et al. 2025, eq. 13):

        R(y) = 0                                   if |y| <= L_max - L_cache
             = ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
             = -1                                  if |y| > L_max

    Args:
        lengths: (B,) int, completion lengths in tokens.
        max_completion_length: L_max in tokens, > 0.
        cache_length: L_cache in tokens, 0 < L_cache <= L_max (DAPO used 4096 of 20480).

    Returns:
        (B,) float32 in [-1, 0].

    Raises:
        ValueError: ``cache_length`` outside (0, max_completion_length].
    """
    if not 0 < cache_length <= max_completion_length:
        raise ValueError(
            f"cache_length ({cache_length}) must be in (0, max_completion_length={max_completion_length}]; "
            "DAPO used max_completion_length / 5"
        )
    length = lengths.float()
    start = float(max_completion_length - cache_length)
    ramp = (start - length) / cache_length  # (B,)
    penalty = torch.where(length <= start, torch.zeros_like(length), ramp)
    return torch.where(length > max_completion_length, torch.full_like(length, -1.0), penalty)


# --------------------------------------------------------------------------------------------------
# rollout engine vs trainer: the sampler's log-probs against the trainer's (Yao et al. 2025)


def sampler_log_ratio(trainer_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log pi_trainer - log pi_sampler per token (B, T) float32, detached; 0 where masked or the sampler gave NaN."""
    valid = _as_bool(mask) & ~torch.isnan(sampler_logprobs)
    return torch.where(valid, trainer_logprobs.detach().float() - torch.nan_to_num(sampler_logprobs.float()), 0.0)


def truncated_is_weights(trainer_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor, cap: float):
    """Truncated importance sampling (TIS; Yao et al. 2025, "Your efficient RL framework secretly brings you
    off-policy RL training"): each token's loss is weighted by w_t = min(pi_trainer(y_t) / pi_sampler(y_t), C),
    pi_sampler the engine's distribution y_t was drawn from, pi_trainer the learner's at the same (old) weights:
    the learner's policy gradient with variance bounded by C (the paper uses C = 2). TRL
    ``vllm_importance_sampling_mode="token_truncate"`` (``clip_max = C``, no ``clip_min``).

    Args: trainer_logprobs (B, T) float32 (detached here); sampler_logprobs (B, T) float32, NaN where the engine
    gave none (weight 1 there); mask (B, T) bool or 0/1; cap C > 1.
    Returns: (B, T) float32 in (0, C], 1 on masked positions; no gradient.
    """
    return torch.exp(sampler_log_ratio(trainer_logprobs, sampler_logprobs, mask)).clamp(max=cap)


def masked_is_weights(trainer_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor, cap: float):
    """Sequence-level masked importance sampling (MIS; the follow-up of Yao et al. 2025, Liu et al. 2025, "When
    speed kills stability"): rho_i = prod_t pi_trainer(y_t) / pi_sampler(y_t) weights all of sequence i's tokens and
    a sequence whose rho_i leaves [1/C, C] is dropped: w_i = rho_i * 1[1/C <= rho_i <= C]. TRL
    ``vllm_importance_sampling_mode="sequence_mask"`` with ``clip_min = 1/C``, ``clip_max = C``.

    Args: as ``truncated_is_weights``. Returns: (B, 1) float32, 0 for dropped sequences; no gradient.
    """
    rho = torch.exp(sampler_log_ratio(trainer_logprobs, sampler_logprobs, mask).sum(-1, keepdim=True))  # (B, 1)
    return torch.where((rho >= 1.0 / cap) & (rho <= cap), rho, 0.0)


def sampler_correction_weights(
    mode: SamplerCorrection, trainer_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor, cap: float
) -> torch.Tensor | None:
    """The loss weights of ``mode``: "tis" (``truncated_is_weights``), "mis" (``masked_is_weights``), "none" (None).
    Raises ValueError: unknown ``mode`` (lists the valid ones) or ``cap`` <= 1."""
    if mode not in get_args(SamplerCorrection):
        raise ValueError(f"unknown sampler correction {mode!r}; valid: {list(get_args(SamplerCorrection))}")
    if cap <= 1.0:
        raise ValueError(f"importance-sampling cap C ({cap}) must be > 1; the paper uses 2")
    fn = {"tis": truncated_is_weights, "mis": masked_is_weights}.get(mode)
    return fn(trainer_logprobs, sampler_logprobs, mask, cap) if fn else None


# --------------------------------------------------------------------------------------------------
# aggregation


def aggregate_loss(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    mode: Aggregation,
    *,
    max_completion_length: int | None = None,
    global_num_tokens: float | None = None,
    world_size: int = 1,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar.

    - "seq-mean-token-mean" (GRPO, Shao et al. 2024 eq. 3; TRL "grpo"):
      1/B sum_i 1/|y_i| sum_t L_{i,t}. Long sequences' tokens weigh less (length bias, Liu et al. 2025).
      Every row counts in B, a fully masked one as 0 (as TRL).
    - "token-mean" (DAPO token-level loss, Yu et al. 2025 eq. 12; TRL "dapo"):
      sum_{i,t} L_{i,t} / N, N = active tokens in the *global* batch. Sharding invariance (OpenRLHF
      style): each of R data-parallel ranks returns local_sum / (N / R); DDP averages gradients over
      ranks, so mean_r(local_sum_r * R / N) = sum_r local_sum_r / N, the single-process loss.
      Pass ``global_num_tokens=N`` (all-reduced) and ``world_size=R``; by default N is this batch's.
    - "seq-mean-token-sum-norm" (Dr. GRPO, Liu et al. 2025 eq. 4; TRL "dr_grpo"):
      sum_{i,t} L_{i,t} / (B * max_completion_length); a constant normaliser, so no length bias.

    Args:
        per_token_loss: (B, T) or (B, 1) float32 (a (B, 1) per-sequence loss is broadcast over tokens).
        mask: (B, T) bool or 0/1.
        mode: one of the three above.
        max_completion_length: required for "seq-mean-token-sum-norm".
        global_num_tokens: "token-mean" only: active tokens across all ranks (and accumulation steps).
        world_size: "token-mean" only: number of data-parallel ranks.

    Returns:
        0-d float32.

    Raises:
        ValueError: unknown mode (lists the valid ones) or a missing ``max_completion_length``.
    """
    m = _as_bool(mask)
    masked = torch.where(m, per_token_loss, 0.0)  # (B, T)
    if mode == "seq-mean-token-mean":
        return (masked.sum(-1) / m.sum(-1).clamp(min=1)).mean()
    if mode == "token-mean":
        n = m.sum().clamp(min=1) if global_num_tokens is None else max(float(global_num_tokens), 1.0) / world_size
        return masked.sum() / n
    if mode == "seq-mean-token-sum-norm":
        if max_completion_length is None or max_completion_length <= 0:
            raise ValueError(
                f"max_completion_length ({max_completion_length}) must be a positive int for "
                "'seq-mean-token-sum-norm' (Dr. GRPO); pass the generation token limit"
            )
        return masked.sum() / (per_token_loss.shape[0] * max_completion_length)
    raise ValueError(f"unknown loss aggregation {mode!r}; valid: {list(get_args(Aggregation))}")


# --------------------------------------------------------------------------------------------------
# entry point


@dataclass(frozen=True)
class PolicyLossConfig:
    """How ``policy_loss`` turns log-probs and advantages into a loss. Defaults: GRPO as in DeepSeekMath."""

    aggregation: Aggregation = "seq-mean-token-mean"  # see aggregate_loss; "token-mean" for DAPO
    epsilon_low: float = 0.2  # lower clip range (PPO/GRPO 0.2)
    epsilon_high: float = 0.2  # upper clip range; DAPO clip-higher recommends 0.28
    importance_sampling_level: ImportanceLevel = "token"  # "sequence" for GSPO (use with eps ~3e-4 / 4e-4)
    beta: float = 0.0  # KL coefficient; GRPO used 0.04, DAPO / Dr. GRPO use 0
    kl_estimator: KLEstimator = "k3"  # see kl_divergence
    kl_placement: KLPlacement = "loss"  # "loss": + beta*KL per token; "reward": use kl_penalized_rewards
    kl_ratio_correction: bool = False  # multiply KL by the importance ratio (DeepSeek-V3.2; TRL 1.16 default True)
    max_completion_length: int | None = None  # required by "seq-mean-token-sum-norm"

    def __post_init__(self) -> None:
        for name, allowed in (
            ("aggregation", Aggregation),
            ("importance_sampling_level", ImportanceLevel),
            ("kl_estimator", KLEstimator),
            ("kl_placement", KLPlacement),
        ):
            if getattr(self, name) not in get_args(allowed):
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; valid: {list(get_args(allowed))}")
        if self.epsilon_low < 0 or self.epsilon_high < 0:
            raise ValueError(
                f"epsilon_low ({self.epsilon_low}) and epsilon_high ({self.epsilon_high}) must be >= 0; typical values 0.2 / 0.28"
            )
        if self.epsilon_low >= 1:
            raise ValueError(
                f"epsilon_low ({self.epsilon_low}) must be < 1 so the lower clip bound 1 - epsilon_low stays positive; use 0.2"
            )
        if self.beta < 0:
            raise ValueError(f"beta ({self.beta}) must be >= 0; use 0 to disable the KL penalty")
        if self.aggregation == "seq-mean-token-sum-norm" and not self.max_completion_length:
            raise ValueError(
                "aggregation 'seq-mean-token-sum-norm' (Dr. GRPO) needs max_completion_length "
                f"(got {self.max_completion_length}); set it to the generation token limit"
            )

    @classmethod
    def from_trl(cls, loss_type: str, **kwargs) -> PolicyLossConfig:
        """The config that matches TRL ``GRPOConfig(loss_type=...)``; ``kwargs`` set the other fields."""
        if loss_type not in TRL_LOSS_TYPES:
            raise ValueError(f"unsupported TRL loss_type {loss_type!r}; valid: {sorted(TRL_LOSS_TYPES)}")
        return cls(aggregation=TRL_LOSS_TYPES[loss_type], **kwargs)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: PolicyLossConfig,
    *,
    ref_logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    global_num_tokens: float | None = None,
    world_size: int = 1,
    is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped policy-gradient loss of the GRPO family, with optional KL to a reference policy.

    L = agg_{i,t}[ -min(w A_i, clip(w, 1-eps_low, 1+eps_high) A_i) + beta * KL_t ]
    (GRPO, Shao et al. 2024, eq. 3; w per ``importance_sampling_level``; agg per ``aggregation``).

    Args:
        logprobs: (B, T) float32 under the current policy (requires grad), e.g. from ``token_logprobs``.
        old_logprobs: (B, T) float32 under the sampling policy; pass ``logprobs.detach()`` on-policy.
        advantages: (B,) or (B, T) float32, e.g. ``compute_advantages(...).reshape(-1)``.
        mask: (B, T) bool or 0/1; True on completion tokens that carry loss (see ``mask_truncated``).
        config: the loss variant.
        ref_logprobs: (B, T) float32 under the reference policy; required when ``beta > 0`` and
            ``kl_placement == "loss"``; when given, ``kl/mean`` is logged either way.
        entropy: (B, T) float32 (``entropy_from_logits``), only for the ``entropy/mean`` metric.
        global_num_tokens, world_size: for "token-mean" under data parallelism (see ``aggregate_loss``).
        is_weights: (B, T) or (B, 1) float32: the engine correction (``sampler_correction_weights``), multiplies the
            clipped surrogate before the KL is added (TRL's ``importance_sampling_ratio``).

    Returns:
        (loss, metrics): loss is 0-d float32; metrics maps names ("loss/policy", "ratio/mean",
        "clip/low_frac", "clip/high_frac", "clip/region_frac", "kl/mean", "kl/is_mean", "entropy/mean") to detached
        0-d float32 tensors (prefix them with the split, e.g. ``train/``).

    Raises:
        ValueError: shape mismatch, or beta > 0 with the KL in the loss but no ``ref_logprobs``.
    """
    if logprobs.shape != old_logprobs.shape or logprobs.shape != mask.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)} and mask "
            f"{tuple(mask.shape)} must all be (B, T)"
        )
    kl_in_loss = config.beta > 0 and config.kl_placement == "loss"
    if kl_in_loss and ref_logprobs is None:
        raise ValueError(
            f"beta ({config.beta}) > 0 with kl_placement='loss' needs ref_logprobs; pass the reference "
            "model's log-probs or set beta=0"
        )
    m = _as_bool(mask)
    # Zero padded positions first so garbage there (even inf) cannot leak into values or gradients.
    logprobs = torch.where(m, logprobs, 0.0)
    old_logprobs = torch.where(m, old_logprobs, 0.0)
    adv = advantages.float().unsqueeze(1) if advantages.ndim == 1 else advantages.float()  # (B, 1) or (B, T)

    log_w = log_importance_weights(logprobs, old_logprobs, m, config.importance_sampling_level)  # (B,T)|(B,1)
    ratio = torch.exp(log_w)
    per_token = clipped_surrogate(ratio, adv, config.epsilon_low, config.epsilon_high)  # (B,T)|(B,1)
    metrics = clip_fractions(ratio, adv, m, config.epsilon_low, config.epsilon_high)
    metrics["ratio/mean"] = masked_mean(ratio.detach(), m)
    if is_weights is not None:  # a constant weight: no gradient flows into it
        per_token = per_token * is_weights.detach()
        metrics["sampler/is_weight_mean"] = masked_mean(is_weights.detach().float(), m)
    if ref_logprobs is not None:
        kl = kl_divergence(logprobs, torch.where(m, ref_logprobs, 0.0), config.kl_estimator)  # (B, T)
        metrics["kl/mean"] = masked_mean(kl.detach(), m)
        # The raw estimator averages over tokens sampled from pi_old. Once the policy has moved, a
        # token it now rejects (pi -> 0) makes k3 = pi_ref/pi - log(pi_ref/pi) - 1 explode, so one
        # token can dominate the mean. Weighting each token by pi/pi_old gives an unbiased estimate
        # of KL(pi || pi_ref) under pi itself (DeepSeek-V3.2, 2025, "unbiased KL estimate"), bounded
        # where the raw one is not: this is the value a KL guard should read.
        w_tok = torch.exp(torch.where(m, logprobs - old_logprobs, 0.0)).detach()  # (B, T)
        metrics["kl/is_mean"] = masked_mean(w_tok * kl.detach(), m)
        if kl_in_loss:
            per_token = per_token + config.beta * (kl * ratio if config.kl_ratio_correction else kl)
    loss = aggregate_loss(
        per_token,
        m,
        config.aggregation,
        max_completion_length=config.max_completion_length,
        global_num_tokens=global_num_tokens,
        world_size=world_size,
    )
    metrics["loss/policy"] = loss.detach()
    if entropy is not None:
        metrics["entropy/mean"] = masked_mean(entropy.detach().float(), m)
    return loss, metrics
