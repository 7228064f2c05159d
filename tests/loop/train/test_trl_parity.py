"""Ratchet's ``policy_loss`` against TRL's own ``GRPOTrainer._compute_loss`` on one fixed batch.

A real ``GRPOTrainer`` is built around a tiny random Llama (no generation is run); its
``_compute_loss`` gets a crafted ``inputs`` dict with ``old_per_token_logps != logps`` (so the clip
is exercised) and reference log-probs (beta > 0, k3 KL). TRL scores tokens with its fused LM head
(a custom autograd function), Ratchet with ``token_logprobs`` on ordinary logits, so the gradient
comparison also checks the two log-prob paths. Loss and every parameter gradient must agree to 1e-5.
"""

from __future__ import annotations

import pytest
import torch

trl = pytest.importorskip("trl")

from ratchet.loop.train.advantages import compute_advantages  # noqa: E402
from ratchet.loop.train.losses import PolicyLossConfig, entropy_from_logits, policy_loss, token_logprobs  # noqa: E402

TEMPERATURE = 0.7  # != 1 so both sides must apply the sampling temperature
MAX_COMPLETION_LENGTH = 6
BETA = 0.05
TOL = 1e-5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    """A saved tiny Llama and a word-level tokenizer over its 64 ids (GRPOTrainer loads its ref model from disk)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, **{f"t{i}": i for i in range(2, 64)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=32,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    path = tmp_path_factory.mktemp("tiny_llama")
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path, tok


def _batch() -> dict[str, torch.Tensor]:
    """4 completions = 2 prompts x G=2; left-padded prompts, right-padded completions of lengths 6, 4, 5, 2."""
    g = torch.Generator().manual_seed(1)
    prompt_ids = torch.randint(2, 64, (4, 3), generator=g)
    prompt_mask = torch.ones(4, 3, dtype=torch.long)
    prompt_mask[2:, 0] = 0  # second prompt is one token shorter (left padding)
    prompt_ids[prompt_mask == 0] = 0
    completion_ids = torch.randint(2, 64, (4, MAX_COMPLETION_LENGTH), generator=g)
    lengths = torch.tensor([6, 4, 5, 2])
    completion_mask = (torch.arange(MAX_COMPLETION_LENGTH)[None, :] < lengths[:, None]).long()  # (4, 6)
    completion_ids[completion_mask == 0] = 0
    rewards = torch.tensor([[1.0, 0.0], [0.3, 0.9]])  # (num_groups=2, G=2)
    advantages = compute_advantages("grpo", rewards).reshape(-1)  # (4,)
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages,
    }


def _ratchet_forward(model, batch):
    """Completion log-probs and entropies, (B, T) float32, through ordinary logits."""
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)  # (B, P + T)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, P + T, V)
    p = batch["prompt_ids"].shape[1]
    logits = logits[:, p - 1 : -1]  # (B, T, V): position t predicts completion token t
    return token_logprobs(logits, batch["completion_ids"], TEMPERATURE), entropy_from_logits(logits, TEMPERATURE)


def _grads(model) -> dict[str, torch.Tensor]:
    out = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


CASES = [  # (id, TRL loss_type, importance_sampling_level, epsilon_low, epsilon_high, use_bias_correction_kl)
    ("grpo", "grpo", "token", 0.2, 0.28, False),
    ("dr_grpo", "dr_grpo", "token", 0.2, 0.28, False),
    ("dapo", "dapo", "token", 0.2, 0.28, False),
    ("gspo", "grpo", "sequence", 0.05, 0.08, False),
    ("grpo_kl_ratio_correction", "grpo", "token", 0.2, 0.28, True),  # TRL 1.16's default
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_policy_loss_matches_trl_grpo_trainer(tiny, tmp_path, case):
    from datasets import Dataset
    from transformers import LlamaForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    _, loss_type, level, eps_low, eps_high, kl_corr = case
    path, tok = tiny
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=MAX_COMPLETION_LENGTH,
        loss_type=loss_type,
        importance_sampling_level=level,
        beta=BETA,
        epsilon=eps_low,
        epsilon_high=eps_high,
        temperature=TEMPERATURE,
        use_bias_correction_kl=kl_corr,
        bf16=False,
        use_cpu=True,
        report_to="none",
        gradient_checkpointing=False,
        seed=0,
    )
    model = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["t2 t3"] * 4}),
        processing_class=tok,
    )
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop; one micro-batch per step here

    batch = _batch()
    mask = batch["completion_mask"].bool()
    with torch.no_grad():
        logps0, _ = _ratchet_forward(model, batch)
    g = torch.Generator().manual_seed(2)
    old = logps0 + 0.3 * torch.randn(logps0.shape, generator=g)  # off-policy: ratios away from 1, so clipping bites
    ref = logps0 + 0.2 * torch.randn(logps0.shape, generator=g)

    # TRL: its real loss code path on a crafted inputs dict.
    inputs = {
        **batch,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": batch["completion_mask"].sum(),
    }
    trl_loss = trainer._compute_loss(model, inputs)
    trl_loss.backward()
    trl_grads = _grads(model)
    trl_metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}

    # Ratchet.
    cfg = PolicyLossConfig.from_trl(
        loss_type,
        epsilon_low=eps_low,
        epsilon_high=eps_high,
        importance_sampling_level=level,
        beta=BETA,
        kl_estimator="k3",
        kl_ratio_correction=kl_corr,
        max_completion_length=MAX_COMPLETION_LENGTH,
    )
    logps, entropy = _ratchet_forward(model, batch)
    loss, metrics = policy_loss(logps, old, batch["advantages"], mask, cfg, ref_logprobs=ref, entropy=entropy)
    loss.backward()
    ours = _grads(model)

    loss_diff = abs(loss.item() - trl_loss.item())
    grad_diff = max((ours[n] - trl_grads[n]).abs().max().item() for n in trl_grads)
    print(
        f"\n[{case[0]}] ratchet={loss.item():.8f} trl={trl_loss.item():.8f} |dloss|={loss_diff:.2e} "
        f"max|dgrad|={grad_diff:.2e} clip_region={metrics['clip/region_frac'].item():.3f}"
    )
    assert metrics["clip/region_frac"] > 0, "the batch must exercise clipping"
    assert set(ours) == set(trl_grads)
    assert loss_diff <= TOL
    for n in trl_grads:
        torch.testing.assert_close(ours[n], trl_grads[n], atol=TOL, rtol=TOL, msg=lambda m: f"grad of {n}: {m}")
    # The logged metrics agree too (TRL logs the KL after its ratio correction, Ratchet the plain estimate).
    for ours_key, trl_key in [
        ("clip/low_frac", "clip_ratio/low_mean"),
        ("clip/high_frac", "clip_ratio/high_mean"),
        ("clip/region_frac", "clip_ratio/region_mean"),
        ("entropy/mean", "entropy"),
    ]:
        assert metrics[ours_key].item() == pytest.approx(trl_metrics[trl_key], abs=TOL), ours_key
    if not kl_corr:
        assert metrics["kl/mean"].item() == pytest.approx(trl_metrics["kl"], abs=TOL)


IS_CASES = [  # (id, our correction, TRL vllm_importance_sampling_mode, TRL loss_type, C)
    ("tis_grpo", "tis", "token_truncate", "grpo", 1.5),
    ("tis_dapo", "tis", "token_truncate", "dapo", 1.5),
    ("mis_grpo", "mis", "sequence_mask", "grpo", 2.0),
]


@pytest.mark.parametrize("case", IS_CASES, ids=[c[0] for c in IS_CASES])
def test_sampler_correction_matches_trl_vllm_importance_sampling(tiny, tmp_path, case):
    """TRL applies ``importance_sampling_ratio`` (computed inline in ``_generate_and_score_completions`` from the old
    and the vLLM log-probs, so it is not callable on its own) by multiplying the per-token loss before adding the KL
    in ``_compute_loss``. Our TIS / MIS weights go through TRL's real loss path and ours: loss and gradients agree.
    The weights themselves follow TRL's formulas (token_truncate: min(exp(old - sampler), C_max); sequence_mask:
    exp(sum(old - sampler)) zeroed outside [C_min, C_max]), checked by hand in test_sampler_correction.py."""
    from datasets import Dataset
    from transformers import LlamaForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from ratchet.loop.train.losses import sampler_correction_weights

    _, mode, trl_mode, loss_type, cap = case
    path, tok = tiny
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=MAX_COMPLETION_LENGTH,
        loss_type=loss_type,
        beta=BETA,
        epsilon=0.2,
        epsilon_high=0.28,
        temperature=TEMPERATURE,
        use_bias_correction_kl=False,
        vllm_importance_sampling_mode=trl_mode,
        vllm_importance_sampling_clip_max=cap,
        vllm_importance_sampling_clip_min=1 / cap if trl_mode.endswith("mask") else None,
        bf16=False,
        use_cpu=True,
        report_to="none",
        seed=0,
    )
    model = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["t2 t3"] * 4}),
        processing_class=tok,
    )
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True  # the loss path TRL takes with vLLM
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 1
    batch = _batch()
    mask = batch["completion_mask"].bool()
    with torch.no_grad():
        logps0, _ = _ratchet_forward(model, batch)
    g = torch.Generator().manual_seed(3)
    old = logps0 + 0.3 * torch.randn(logps0.shape, generator=g)
    ref = logps0 + 0.2 * torch.randn(logps0.shape, generator=g)
    sampler = old + 0.5 * torch.randn(logps0.shape, generator=g)  # the engine's log-probs: another kernel's
    weights = sampler_correction_weights(mode, old, sampler, mask, cap)
    if mode == "tis":  # the batch exercises the truncation
        assert (weights[mask] == cap).any() and (weights[mask] < 1).any()
    else:  # some sequences kept, some dropped
        assert (weights == 0).any() and (weights > 0).any()
    inputs = {
        **batch,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "importance_sampling_ratio": weights,
        "num_items_in_batch": batch["completion_mask"].sum(),
    }
    trl_loss = trainer._compute_loss(model, inputs)
    trl_loss.backward()
    trl_grads = _grads(model)
    cfg = PolicyLossConfig.from_trl(
        loss_type, epsilon_low=0.2, epsilon_high=0.28, beta=BETA, max_completion_length=MAX_COMPLETION_LENGTH
    )
    logps, _ = _ratchet_forward(model, batch)
    loss, _ = policy_loss(logps, old, batch["advantages"], mask, cfg, ref_logprobs=ref, is_weights=weights)
    loss.backward()
    ours = _grads(model)
    assert abs(loss.item() - trl_loss.item()) <= TOL
    for n in trl_grads:
        torch.testing.assert_close(ours[n], trl_grads[n], atol=TOL, rtol=TOL, msg=lambda m: f"grad of {n}: {m}")
