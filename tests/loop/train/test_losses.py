"""GRPO-family loss pieces: hand-computed tiny tensors, loop-vs-vectorised, padding and sharding invariance."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet.loop.train.losses import (
    PolicyLossConfig,
    aggregate_loss,
    clip_fractions,
    clipped_surrogate,
    entropy_from_logits,
    kl_divergence,
    kl_penalized_rewards,
    log_importance_weights,
    mask_truncated,
    policy_loss,
    soft_overlong_punishment,
    token_logprobs,
)

AGGREGATIONS = ["seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"]
LEVELS = ["token", "sequence", "sequence_token"]


# ----------------------------------------------------------------------------- log-probs and entropy


def test_token_logprobs_hand_computed_with_temperature():
    logits = torch.tensor([[[2.0, 0.0], [0.0, 0.0]]])  # (B=1, T=2, V=2)
    ids = torch.tensor([[0, 1]])
    # tau = 2: z = [1, 0] -> log p(0) = 1 - log(e + 1); z = [0, 0] -> log p(1) = -log 2
    expected = torch.tensor([[1 - math.log(math.e + 1), -math.log(2)]])
    torch.testing.assert_close(token_logprobs(logits, ids, temperature=2.0), expected)


def test_token_logprobs_is_float32_for_bfloat16_logits():
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    ids = torch.tensor([[0, 1, 2], [3, 4, 0]])
    out = token_logprobs(logits, ids)
    assert out.dtype == torch.float32
    ref = torch.log_softmax(logits.float(), -1).gather(-1, ids[..., None]).squeeze(-1)
    torch.testing.assert_close(out, ref)


def test_token_logprobs_rejects_bad_temperature_and_shapes():
    with pytest.raises(ValueError, match=r"temperature \(0\) must be > 0"):
        token_logprobs(torch.zeros(1, 1, 2), torch.zeros(1, 1, dtype=torch.long), temperature=0)
    with pytest.raises(ValueError, match="disagree on"):
        token_logprobs(torch.zeros(1, 3, 2), torch.zeros(1, 2, dtype=torch.long))


def test_entropy_uniform_is_log_v_and_peaked_is_near_zero():
    logits = torch.stack([torch.zeros(4), torch.tensor([50.0, 0.0, 0.0, 0.0])])[None]  # (1, 2, 4)
    h = entropy_from_logits(logits)
    assert h.shape == (1, 2) and h.dtype == torch.float32
    assert h[0, 0].item() == pytest.approx(math.log(4), abs=1e-6)
    assert h[0, 1].item() == pytest.approx(0.0, abs=1e-6)


# ----------------------------------------------------------------------------- ratio, clip, KL


def test_log_importance_weights_token_and_sequence_hand_computed():
    logp = torch.tensor([[0.2, 0.4, 9.0]])
    old = torch.zeros(1, 3)
    mask = torch.tensor([[True, True, False]])
    torch.testing.assert_close(log_importance_weights(logp, old, mask, "token"), torch.tensor([[0.2, 0.4, 0.0]]))
    torch.testing.assert_close(log_importance_weights(logp, old, mask, "sequence"), torch.tensor([[0.3]]))
    torch.testing.assert_close(log_importance_weights(logp, old, mask, "sequence_token"), torch.tensor([[0.3, 0.3, 0.3]]))
    with pytest.raises(ValueError, match=r"unknown importance_sampling_level 'seq'.*'token', 'sequence'"):
        log_importance_weights(logp, old, mask, "seq")


@pytest.mark.parametrize("adv, expected", [(1.0, [-0.5, -1.0, -1.28]), (-1.0, [0.8, 1.0, 1.5])])
def test_clipped_surrogate_clip_higher_hand_computed(adv, expected):
    # A > 0: min(w, clip(w, 0.8, 1.28)) caps the gain at 1.28; A < 0: max(w, clip) floors the ratio at 0.8.
    ratio = torch.tensor([[0.5, 1.0, 1.5]])
    out = clipped_surrogate(ratio, torch.tensor([[adv]]), epsilon_low=0.2, epsilon_high=0.28)
    torch.testing.assert_close(out, torch.tensor([expected]))


def test_clip_fractions_hand_computed():
    ratio = torch.tensor([[0.5, 1.5, 1.0, 0.5], [0.5, 1.5, 1.1, 9.0]])
    adv = torch.tensor([[-1.0], [1.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    # row 0 (A<0): low-clipped token 0 and 3; row 1 (A>0): high-clipped token 1 (token 3 masked)
    m = clip_fractions(ratio, adv, mask, 0.2, 0.28)
    assert m["clip/low_frac"].item() == pytest.approx(2 / 7)
    assert m["clip/high_frac"].item() == pytest.approx(1 / 7)
    assert m["clip/region_frac"].item() == pytest.approx(3 / 7)


def test_kl_estimators_hand_computed():
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    log_r = math.log(0.5)  # log(pi_ref / pi)
    assert kl_divergence(logp, ref, "k1").item() == pytest.approx(-log_r)
    assert kl_divergence(logp, ref, "k2").item() == pytest.approx(0.5 * log_r**2)
    assert kl_divergence(logp, ref, "k3").item() == pytest.approx(0.5 - log_r - 1)
    with pytest.raises(ValueError, match=r"unknown kl_estimator 'k4'.*'k1', 'k2', 'k3'"):
        kl_divergence(logp, ref, "k4")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-5, 0), min_size=2, max_size=2))
def test_k3_and_k2_are_non_negative_and_zero_at_equality(pair):
    logp, ref = torch.tensor([[pair[0]]]), torch.tensor([[pair[1]]])
    assert kl_divergence(logp, ref, "k3").item() >= -1e-7 and kl_divergence(logp, ref, "k2").item() >= 0
    assert kl_divergence(logp, logp, "k3").item() == 0.0


def test_kl_in_reward_hand_computed():
    rewards = torch.tensor([1.0, 0.0])
    logp = torch.tensor([[-1.0, -2.0], [-1.0, -1.0]])
    ref = torch.tensor([[-1.5, -2.0], [-3.0, -1.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    # k1 = logp - ref: row 0 sum 0.5; row 1: 2.0 (second token masked)
    out = kl_penalized_rewards(rewards, logp, ref, mask, beta=0.1, estimator="k1")
    torch.testing.assert_close(out, torch.tensor([1.0 - 0.05, 0.0 - 0.2]))


# ----------------------------------------------------------------------------- overlong


def test_mask_truncated_zeroes_whole_rows():
    mask = torch.ones(3, 2, dtype=torch.long)
    out = mask_truncated(mask, torch.tensor([False, True, False]))
    assert out.tolist() == [[True, True], [False, False], [True, True]]


def test_soft_overlong_punishment_dapo_eq13_hand_computed():
    lengths = torch.tensor([3, 6, 8, 10, 11])  # L_max = 10, L_cache = 4: ramp over (6, 10]
    out = soft_overlong_punishment(lengths, max_completion_length=10, cache_length=4)
    torch.testing.assert_close(out, torch.tensor([0.0, 0.0, -0.5, -1.0, -1.0]))
    with pytest.raises(ValueError, match=r"cache_length \(0\) must be in \(0, max_completion_length=10\]"):
        soft_overlong_punishment(lengths, 10, 0)


# ----------------------------------------------------------------------------- aggregation

PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("seq-mean-token-mean", (2.0 + 4.0) / 2),  # GRPO: mean of per-sequence means
        ("token-mean", 10.0 / 4),  # DAPO: sum over active tokens / number of active tokens
        ("seq-mean-token-sum-norm", 10.0 / (2 * 5)),  # Dr. GRPO: sum / (B * max_completion_length=5)
    ],
)
def test_aggregation_hand_computed(mode, expected):
    assert aggregate_loss(PER_TOKEN, MASK, mode, max_completion_length=5).item() == pytest.approx(expected)


def test_aggregation_errors_name_the_fix():
    with pytest.raises(ValueError, match=r"unknown loss aggregation 'mean'.*'seq-mean-token-mean', 'token-mean'"):
        aggregate_loss(PER_TOKEN, MASK, "mean")
    with pytest.raises(ValueError, match="max_completion_length.*generation token limit"):
        aggregate_loss(PER_TOKEN, MASK, "seq-mean-token-sum-norm")


def test_config_cross_field_checks():
    with pytest.raises(ValueError, match=r"unknown aggregation 'bnpo'; valid: \['seq-mean-token-mean'"):
        PolicyLossConfig(aggregation="bnpo")
    with pytest.raises(ValueError, match="needs max_completion_length"):
        PolicyLossConfig.from_trl("dr_grpo")
    with pytest.raises(ValueError, match=r"unsupported TRL loss_type 'cispo'; valid: \['dapo', 'dr_grpo', 'grpo'\]"):
        PolicyLossConfig.from_trl("cispo")
    with pytest.raises(ValueError, match=r"epsilon_low \(1.5\) must be < 1"):
        PolicyLossConfig(epsilon_low=1.5)


def test_policy_loss_requires_ref_for_kl_in_loss():
    z = torch.zeros(1, 2)
    with pytest.raises(ValueError, match=r"beta \(0.1\) > 0 with kl_placement='loss' needs ref_logprobs"):
        policy_loss(z, z, torch.zeros(1), torch.ones(1, 2), PolicyLossConfig(beta=0.1))


# ----------------------------------------------------------------------------- policy_loss


def _random_batch(seed: int, b: int = 4, t: int = 5):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(b, t, generator=g) * 3
    old = logp + 0.3 * torch.randn(b, t, generator=g)
    ref = logp + 0.2 * torch.randn(b, t, generator=g)
    adv = torch.randn(b, generator=g)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = torch.arange(t)[None, :] < lengths[:, None]  # (b, t) right-padded
    return logp, old, ref, adv, mask


def test_on_policy_without_kl_loss_is_minus_mean_advantage_and_grad_is_reinforce():
    logp, _, _, adv, mask = _random_batch(0)
    logp = logp.clone().requires_grad_(True)
    loss, metrics = policy_loss(logp, logp.detach(), adv, mask, PolicyLossConfig())
    assert loss.item() == pytest.approx(-adv.mean().item(), abs=1e-6)  # ratio == 1 everywhere
    loss.backward()
    n = mask.sum(-1, keepdim=True).float()
    expected = torch.where(mask, -adv[:, None] / n / len(adv), 0.0)  # d/dlogp of -1/B sum_i A_i/|y_i| sum_t logp
    torch.testing.assert_close(logp.grad, expected)
    assert metrics["clip/region_frac"].item() == 0.0 and metrics["ratio/mean"].item() == pytest.approx(1.0)


def test_kl_placement_reward_keeps_kl_out_of_the_loss_but_logs_it():
    logp, old, ref, adv, mask = _random_batch(1)
    in_reward, m = policy_loss(logp, old, adv, mask, PolicyLossConfig(beta=0.5, kl_placement="reward"), ref_logprobs=ref)
    no_kl, _ = policy_loss(logp, old, adv, mask, PolicyLossConfig())
    assert in_reward.item() == pytest.approx(no_kl.item()) and m["kl/mean"].item() > 0


def _loop_policy_loss(logp, old, ref, adv, mask, cfg: PolicyLossConfig) -> float:
    """One sequence and one token at a time, written from the papers' equations."""
    b, t = logp.shape
    seq_losses, total, n_tokens = [], 0.0, 0
    for i in range(b):
        toks = [j for j in range(t) if mask[i, j]]
        seq_log_ratio = sum(float(logp[i, j] - old[i, j]) for j in toks) / max(len(toks), 1)
        s = 0.0
        for j in toks:
            w = math.exp(seq_log_ratio) if cfg.importance_sampling_level != "token" else math.exp(float(logp[i, j] - old[i, j]))
            a = float(adv[i])
            loss = -min(w * a, min(max(w, 1 - cfg.epsilon_low), 1 + cfg.epsilon_high) * a)
            d = float(ref[i, j] - logp[i, j])
            kl = {"k1": -d, "k2": 0.5 * d * d, "k3": math.exp(d) - d - 1}[cfg.kl_estimator]
            s += loss + cfg.beta * kl
        seq_losses.append(s / max(len(toks), 1))
        total += s
        n_tokens += len(toks)
    if cfg.aggregation == "seq-mean-token-mean":
        return sum(seq_losses) / b
    if cfg.aggregation == "token-mean":
        return total / max(n_tokens, 1)
    return total / (b * cfg.max_completion_length)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    mode=st.sampled_from(AGGREGATIONS),
    level=st.sampled_from(LEVELS),
    kl=st.sampled_from(["k1", "k2", "k3"]),
)
def test_vectorised_policy_loss_equals_loop(seed, mode, level, kl):
    logp, old, ref, adv, mask = _random_batch(seed)
    cfg = PolicyLossConfig(
        aggregation=mode,
        importance_sampling_level=level,
        epsilon_low=0.1,
        epsilon_high=0.15,
        beta=0.04,
        kl_estimator=kl,
        max_completion_length=8,
    )
    loss, _ = policy_loss(logp, old, adv, mask, cfg, ref_logprobs=ref)
    assert torch.allclose(loss, torch.tensor(_loop_policy_loss(logp, old, ref, adv, mask, cfg)), atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    mode=st.sampled_from(AGGREGATIONS),
    level=st.sampled_from(LEVELS),
    extra=st.integers(1, 3),
    garbage=st.sampled_from([0.0, -1e4, float("-inf"), float("nan")]),
)
def test_loss_and_grad_are_invariant_to_padding(seed, mode, level, extra, garbage):
    """Extra padded columns holding anything (even -inf/NaN log-probs) change neither loss nor gradient."""
    logp, old, ref, adv, mask = _random_batch(seed)
    cfg = PolicyLossConfig(aggregation=mode, importance_sampling_level=level, beta=0.04, max_completion_length=8)
    pad = lambda x, v: torch.cat([x, torch.full((x.shape[0], extra), v, dtype=x.dtype)], dim=1)  # noqa: E731
    a = logp.clone().requires_grad_(True)
    b = pad(logp, garbage).requires_grad_(True)
    loss_a, _ = policy_loss(a, old, adv, mask, cfg, ref_logprobs=ref)
    loss_b, _ = policy_loss(b, pad(old, garbage), adv, pad(mask, False), cfg, ref_logprobs=pad(ref, garbage))
    loss_a.backward()
    loss_b.backward()
    torch.testing.assert_close(loss_b, loss_a)
    torch.testing.assert_close(b.grad[:, : logp.shape[1]], a.grad)
    assert (b.grad[:, logp.shape[1] :] == 0).all()


def test_masking_a_token_equals_dropping_it():
    """Masking the last active token of a sequence gives the loss of the batch where it was never generated."""
    logp, old, ref, adv, mask = _random_batch(3)
    mask[:, :] = True
    cfg = PolicyLossConfig(aggregation="seq-mean-token-mean", beta=0.04)
    shorter = mask.clone()
    shorter[:, -1] = False
    full, _ = policy_loss(logp[:, :-1], old[:, :-1], adv, mask[:, :-1], cfg, ref_logprobs=ref[:, :-1])
    masked, _ = policy_loss(logp, old, adv, shorter, cfg, ref_logprobs=ref)
    torch.testing.assert_close(masked, full)


def test_gspo_token_variant_has_gspo_value_and_gradient_for_sequence_advantages():
    """GSPO-token (eq. 13) equals GSPO (eq. 7) in value and gradient when advantages are per sequence."""
    logp, old, _, adv, mask = _random_batch(4)
    grads, losses = [], []
    for level in ("sequence", "sequence_token"):
        x = logp.clone().requires_grad_(True)
        loss, _ = policy_loss(
            x, old, adv, mask, PolicyLossConfig(importance_sampling_level=level, epsilon_low=0.05, epsilon_high=0.08)
        )
        loss.backward()
        grads.append(x.grad)
        losses.append(loss)
    torch.testing.assert_close(losses[0], losses[1])
    torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.parametrize("world_size", [2, 4])
def test_token_mean_is_invariant_to_data_parallel_sharding(world_size):
    """Per-rank losses normalised by the global token count / world_size average (as DDP averages gradients)
    to the single-process loss, and so do their gradients, however unevenly tokens fall across ranks."""
    logp, old, ref, adv, mask = _random_batch(5, b=8, t=6)
    cfg = PolicyLossConfig(aggregation="token-mean", beta=0.04, epsilon_low=0.1, epsilon_high=0.15)
    x = logp.clone().requires_grad_(True)
    global_loss, _ = policy_loss(x, old, adv, mask, cfg, ref_logprobs=ref)
    global_loss.backward()
    n_global = float(mask.sum())
    y = logp.clone().requires_grad_(True)
    rank_losses = []
    for r in torch.arange(8).chunk(world_size):  # contiguous shards, one per rank
        loss, _ = policy_loss(
            y[r], old[r], adv[r], mask[r], cfg, ref_logprobs=ref[r], global_num_tokens=n_global, world_size=world_size
        )
        (loss / world_size).backward()  # DDP: gradient averaged over ranks
        rank_losses.append(loss)
    torch.testing.assert_close(torch.stack(rank_losses).mean(), global_loss)
    torch.testing.assert_close(y.grad, x.grad)
    # Without the global count (each rank normalising by its own tokens) the average is generally wrong.
    local = torch.stack(
        [policy_loss(logp[r], old[r], adv[r], mask[r], cfg, ref_logprobs=ref[r])[0] for r in torch.arange(8).chunk(world_size)]
    ).mean()
    assert not torch.allclose(local, global_loss)


def test_metrics_keys_and_entropy():
    logp, old, ref, adv, mask = _random_batch(6)
    entropy = torch.full(logp.shape, 2.0)
    _, m = policy_loss(logp, old, adv, mask, PolicyLossConfig(beta=0.04), ref_logprobs=ref, entropy=entropy)
    assert set(m) == {
        "loss/policy",
        "ratio/mean",
        "clip/low_frac",
        "clip/high_frac",
        "clip/region_frac",
        "kl/mean",
        "kl/is_mean",
        "entropy/mean",
    }
    assert m["entropy/mean"].item() == pytest.approx(2.0)
    assert all(v.ndim == 0 and not v.requires_grad for v in m.values())


def test_importance_weighted_kl_is_bounded_where_k3_explodes():
    """A token the policy pushed from p_old = p_ref = e^-1 down to e^-30: raw k3 ~ e^29, the guard value stays ~1."""
    ref = torch.tensor([[-1.0, -1.0, -1.0, -1.0]])
    old = ref.clone()
    logp = torch.tensor([[-1.0, -1.0, -1.0, -30.0]])
    mask = torch.ones_like(logp, dtype=torch.bool)
    _, m = policy_loss(logp, old, torch.tensor([1.0]), mask, PolicyLossConfig(), ref_logprobs=ref)
    assert m["kl/mean"].item() > 1e11
    # w * k3 = (p/p_ref) * (p_ref/p - log(p_ref/p) - 1) = 1 - e^-29 * (29 + 1) per the moved token; 0 elsewhere
    assert m["kl/is_mean"].item() == pytest.approx(0.25, rel=1e-6)
    # on-policy (old = current) the weights are 1 and both estimates agree
    _, m2 = policy_loss(logp, logp, torch.tensor([1.0]), mask, PolicyLossConfig(), ref_logprobs=ref)
    assert m2["kl/is_mean"].item() == pytest.approx(m2["kl/mean"].item())
