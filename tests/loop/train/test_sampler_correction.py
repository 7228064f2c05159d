"""Rollout engine vs trainer: TIS / MIS weights, the mismatch metrics and the top-p support, on hand-computed tensors."""

from __future__ import annotations

import math

import pytest
import torch

from ratchet.loop.train.losses import (
    PolicyLossConfig,
    masked_is_weights,
    policy_loss,
    sampler_correction_weights,
    token_logprobs,
    truncated_is_weights,
)
from ratchet.loop.train.mismatch import nucleus_logprobs, sampler_mismatch

NAN = float("nan")
L2, L3 = math.log(2.0), math.log(3.0)


def _pair():
    """Two sequences of 3 tokens; the second has 2 active tokens. trainer - sampler = [ln 3, 0, -ln 2] / [ln 2, ln 2, x]."""
    sampler = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -9.0]])
    trainer = sampler + torch.tensor([[L3, 0.0, -L2], [L2, L2, 5.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    return trainer, sampler, mask


def test_tis_truncates_each_token_ratio_at_c():
    trainer, sampler, mask = _pair()
    w = truncated_is_weights(trainer, sampler, mask, cap=2.0)
    expected = torch.tensor([[2.0, 1.0, 0.5], [2.0, 2.0, 1.0]])  # 3 -> C = 2; the masked token weighs 1
    torch.testing.assert_close(w, expected)
    assert not w.requires_grad


def test_mis_keeps_a_sequence_ratio_inside_the_band_and_drops_it_outside():
    trainer, sampler, mask = _pair()
    # rho_0 = 3 * 1 * 0.5 = 1.5 (inside [1/2, 2]); rho_1 = 2 * 2 = 4 (outside: dropped)
    torch.testing.assert_close(masked_is_weights(trainer, sampler, mask, cap=2.0), torch.tensor([[1.5], [0.0]]))
    torch.testing.assert_close(masked_is_weights(trainer, sampler, mask, cap=5.0), torch.tensor([[1.5], [4.0]]))


def test_tokens_without_a_sampler_value_are_not_corrected():
    trainer, sampler, mask = _pair()
    sampler[0, 0] = NAN  # vLLM gave none (an EOS appended after it stopped)
    assert truncated_is_weights(trainer, sampler, mask, 2.0)[0, 0] == 1.0
    torch.testing.assert_close(masked_is_weights(trainer, sampler, mask, 2.0)[0], torch.tensor([0.5]))


def test_correction_modes_and_errors():
    trainer, sampler, mask = _pair()
    assert sampler_correction_weights("none", trainer, sampler, mask, 2.0) is None
    torch.testing.assert_close(
        sampler_correction_weights("tis", trainer, sampler, mask, 2.0), truncated_is_weights(trainer, sampler, mask, 2.0)
    )
    with pytest.raises(ValueError, match=r"unknown sampler correction 'is'; valid: \['tis', 'mis', 'none'\]"):
        sampler_correction_weights("is", trainer, sampler, mask, 2.0)
    with pytest.raises(ValueError, match="must be > 1"):
        sampler_correction_weights("tis", trainer, sampler, mask, 1.0)


def test_weights_multiply_the_clipped_surrogate_before_the_kl_term():
    """On-policy (ratio 1, no clip): per-token loss is -A * w + beta * KL; token-mean aggregation."""
    trainer, sampler, mask = _pair()
    lp = trainer.clone().requires_grad_(True)
    ref = trainer - 0.1
    adv = torch.tensor([1.0, -2.0])
    cfg = PolicyLossConfig(aggregation="token-mean", beta=0.5)
    w = truncated_is_weights(trainer, sampler, mask, 2.0)
    loss, m = policy_loss(lp, lp.detach(), adv, mask, cfg, ref_logprobs=ref, is_weights=w)
    k3 = math.exp(-0.1) + 0.1 - 1  # the same KL on every token
    by_hand = (-(1.0 * (2.0 + 1.0 + 0.5)) - (-2.0) * (2.0 + 2.0) + 0.5 * k3 * 5) / 5
    assert loss.item() == pytest.approx(by_hand, abs=1e-6)
    assert m["sampler/is_weight_mean"].item() == pytest.approx((2 + 1 + 0.5 + 2 + 2) / 5)
    loss.backward()  # gradient of each token: -A * w / N (the weight is a constant)
    torch.testing.assert_close(lp.grad[0], torch.tensor([-2.0, -1.0, -0.5]) / 5 + 0.5 * (1 - math.exp(-0.1)) / 5)


def test_mismatch_metrics_by_hand():
    trainer, sampler, mask = _pair()
    m = sampler_mismatch(trainer, sampler, mask, threshold=0.5)
    assert m["sampler/logp_diff_mean"].item() == pytest.approx((L3 + 0 + L2 + L2 + L2) / 5)
    assert m["sampler/logp_diff_max"].item() == pytest.approx(L3)
    assert m["sampler/logp_diff_frac"].item() == pytest.approx(4 / 5)  # |d| > 0.5: ln 3, ln 2 three times
    assert m["sampler/seq_ratio_mean"].item() == pytest.approx((1.5 + 4.0) / 2)
    assert m["sampler/seq_ratio_std"].item() == pytest.approx(1.25)
    assert (m["sampler/seq_ratio_min"].item(), m["sampler/seq_ratio_max"].item()) == pytest.approx((1.5, 4.0))
    assert m["sampler/tokens"].item() == 5
    empty = sampler_mismatch(trainer, torch.full_like(sampler, NAN), mask)
    assert all(v.item() == 0 for v in empty.values())


def test_nucleus_logprobs_renormalise_over_the_top_p_set():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])  # top_p = 0.7: {0.5, 0.3} (mass 0.8) is the smallest set reaching it
    logits = probs.log().view(1, 1, 4).repeat(1, 3, 1)  # (B=1, T=3, V=4)
    ids = torch.tensor([[0, 1, 3]])  # token 3 lies outside the nucleus: the sampler kept it, so it joins the support
    got = nucleus_logprobs(logits, ids, 1.0, 0.7)
    expected = torch.tensor([[math.log(0.5 / 0.8), math.log(0.3 / 0.8), math.log(0.05 / 0.85)]])
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(nucleus_logprobs(logits, ids, 1.0, 1.0), token_logprobs(logits, ids))
    with pytest.raises(ValueError, match=r"top_p \(0\) must be in \(0, 1\]"):
        nucleus_logprobs(logits, ids, 1.0, 0)
