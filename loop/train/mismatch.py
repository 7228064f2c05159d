"""The gap between the rollout engine's and the trainer's log-probs of the sampled tokens, measured on one support.

Different kernels, dtypes and batch shapes (vLLM vs transformers, bf16 vs fp32) make the engine sample from a
distribution slightly different from the trainer's: off-policy drift that can collapse a run (Yao et al. 2025,
"Your efficient RL framework secretly brings you off-policy RL training"). ``nucleus_logprobs`` puts the trainer's
log-probs on the support top-p sampling draws from (the engine's are renormalised there); ``sampler_mismatch``
gives the per-step metrics. The corrections themselves (TIS, MIS) are in ``loop.train.losses``.
"""

from __future__ import annotations

import torch

from ratchet.loop.train.losses import _as_bool, sampler_log_ratio, token_logprobs


def nucleus_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """log pi(y_t) on the support top-p sampling draws from: z = logits / tau, renormalised over the nucleus.

    log p_t = z_t[y_t] - logsumexp_{v in K_t} z_t[v], K_t = the smallest set of highest-probability tokens whose
    mass reaches ``top_p`` (Holtzman et al. 2020; the rule of transformers' ``TopPLogitsWarper``) plus y_t itself
    (the sampler kept it). vLLM's ``processed_logprobs`` and the transformers backend's are on this support; a
    full-vocabulary log-softmax is lower by -log(mass of K_t), a bias the sampler/trainer ratio would carry.

    Args:
        logits: (B, T, V) any float dtype, aligned with ``token_ids`` (B, T) int64 as in ``token_logprobs``.
        temperature: > 0. top_p: in (0, 1].

    Returns:
        (B, T) float32 (<= 0; equals ``token_logprobs`` at ``top_p = 1``).

    Raises:
        ValueError: ``top_p`` outside (0, 1], or as ``token_logprobs``.
    """
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p ({top_p}) must be in (0, 1]; use the rollouts' generation.top_p")
    full = token_logprobs(logits, token_ids, temperature)  # validates shapes and temperature
    if top_p == 1.0:
        return full
    z = logits.float() / temperature  # (B, T, V)
    sorted_z, order = torch.sort(z, dim=-1)  # ascending, as TopPLogitsWarper
    cum = torch.softmax(sorted_z, dim=-1).cumsum(-1)
    drop_sorted = cum <= 1 - top_p
    drop_sorted[..., -1] = False  # keep at least the most likely token
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # (B, T, V) bool
    drop.scatter_(-1, token_ids.unsqueeze(-1), False)  # the sampled token is in the sampler's support
    kept_lse = torch.logsumexp(z.masked_fill(drop, float("-inf")), dim=-1)  # (B, T)
    return torch.gather(z, -1, token_ids.unsqueeze(-1)).squeeze(-1) - kept_lse


def sampler_mismatch(
    trainer_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor, threshold: float = 0.1
) -> dict[str, torch.Tensor]:
    """How far the rollout engine's log-probs are from the trainer's on the sampled tokens (TRL's
    ``sampling/sampling_logp_difference/*`` and ``importance_sampling_ratio/*``).

    Over active tokens with a sampler value: d_t = |log pi_trainer(y_t) - log pi_sampler(y_t)|; per sequence
    rho_i = exp(sum_t (log pi_trainer - log pi_sampler)), over sequences with at least one such token.

    Args:
        as ``truncated_is_weights``; threshold: nats.

    Returns:
        {"sampler/logp_diff_mean", "sampler/logp_diff_max", "sampler/logp_diff_frac" (share of tokens with
        d_t > threshold), "sampler/seq_ratio_mean", "sampler/seq_ratio_std", "sampler/seq_ratio_min",
        "sampler/seq_ratio_max", "sampler/tokens"}: detached 0-d float32 (0 when no token has a sampler value).
    """
    with torch.no_grad():
        valid = _as_bool(mask) & ~torch.isnan(sampler_logprobs)
        d = sampler_log_ratio(trainer_logprobs, sampler_logprobs, mask)  # (B, T), 0 off ``valid``
        n = valid.sum()
        zero = torch.zeros((), dtype=torch.float32)
        if not bool(n):
            names = ("logp_diff_mean", "logp_diff_max", "logp_diff_frac", "seq_ratio_mean", "seq_ratio_std")
            return {f"sampler/{k}": zero for k in (*names, "seq_ratio_min", "seq_ratio_max", "tokens")}
        rho = torch.exp(d.sum(-1)[valid.any(-1)])  # (B',)
        return {
            "sampler/logp_diff_mean": d.abs().sum() / n,
            "sampler/logp_diff_max": d.abs().max(),
            "sampler/logp_diff_frac": ((d.abs() > threshold) & valid).sum() / n,
            "sampler/seq_ratio_mean": rho.mean(),
            "sampler/seq_ratio_std": rho.std(unbiased=False),
            "sampler/seq_ratio_min": rho.min(),
            "sampler/seq_ratio_max": rho.max(),
            "sampler/tokens": n.float(),
        }
