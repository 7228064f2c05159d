"""GRPO-family policy-gradient pass over a round's verified groups (GRPO, Dr. GRPO, DAPO, GSPO, RLOO).

The math lives in ``loop.advantages`` and ``loop.losses`` (checked against TRL's GRPOTrainer to
1e-5); this package only orchestrates: tokenize the groups, compute advantages, compute the old
log-probs once at the start of the pass (skipped when the pass is one optimizer step on fresh rollouts: then
pi_old = pi_theta and the old log-probs are the training forward's, detached, as TRL does with
``num_iterations = 1``) and the frozen reference's (when beta > 0, or when the KL guard is measured), then
``ppo_epochs`` passes of mini-batch updates with gradient accumulation and clipping, under
``accelerate`` so the same code runs on one CPU or many GPUs. Guard metrics are returned per
optimizer step; a NaN or inf aborts the pass before anything is saved.

It trains on the token ids the engine sampled (``grpo.batch``) and, where the rollouts carry the
sampler's log-probs, measures per step how far they are from the trainer's (``train/sampler/*``) and corrects
the gap with truncated or masked importance sampling (``grpo.sampler_correction``; Yao et al. 2025).

Modules: ``batch`` (the rollouts as token tensors, group advantages), ``forward`` (per-token log-probs under a
policy), ``step`` (the mini-batch plan and one optimizer step), ``learner`` (``GRPOLearner``, ``train_grpo``).
"""

from ratchet.loop.train.grpo.batch import GRPOSample, PackedRollouts, fit_message, group_advantages, pack_rollouts
from ratchet.loop.train.grpo.forward import completion_logprobs, no_grad_logprobs, rollout_logprobs, rollout_module
from ratchet.loop.train.grpo.learner import GRPOLearner, GRPOResult, GRPORun, StepFn, adamw, train_grpo

__all__ = [
    "GRPOLearner",
    "GRPOResult",
    "GRPORun",
    "GRPOSample",
    "PackedRollouts",
    "StepFn",
    "adamw",
    "completion_logprobs",
    "fit_message",
    "group_advantages",
    "no_grad_logprobs",
    "pack_rollouts",
    "rollout_logprobs",
    "rollout_module",
    "train_grpo",
]
