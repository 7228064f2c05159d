"""The GRPO pass on a tiny model: it learns from group advantages, guards, and aborts on NaN."""

import pytest
import torch

from loop.grpo import GRPOSample, GRPOSettings, completion_logprobs, group_advantages, train_grpo, _tokenize
from loop.sft import SFTExample
from loop.tasks import chat_messages


def samples(rewards_by_group):
    out = []
    for g, rewards in enumerate(rewards_by_group):
        for i, r in enumerate(rewards):
            text = "Answer: 7" if r > 0 else f"Answer: {i + 1}"
            out.append(GRPOSample(g, SFTExample(chat_messages("sys", [], f"What is {g} + {7 - g}?"), text), r, False))
    return out


def test_group_advantages_and_dynamic_sampling():
    s = samples([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    adv, kept, zero = group_advantages(s, "dr_grpo", dynamic_sampling=True)
    assert zero == 1 and kept == [0, 1, 2, 3]
    assert torch.allclose(adv[:4], torch.tensor([0.5, -0.5, -0.5, 0.5])) and torch.all(adv[4:] == 0)
    _, kept_all, _ = group_advantages(s, "grpo", dynamic_sampling=False)
    assert kept_all == list(range(8))
    with pytest.raises(ValueError, match="unequal sizes"):
        group_advantages(s[:-1], "grpo", dynamic_sampling=False)


def test_left_padded_logprobs_match_unpadded(tiny_model_dir):
    """Positions come from the attention mask: a left-padded row scores its completion exactly as alone."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    long = GRPOSample(0, SFTExample(chat_messages("a much longer system prompt here", [], "What is 12 + 30?"), "Answer: 42"), 1.0, False)
    short = GRPOSample(0, SFTExample(chat_messages("sys", [], "1+1?"), "Answer: 2"), 1.0, False)
    with torch.no_grad():
        ids, attn, _, cmask, P = _tokenize(tok, [long, short], 256)
        both, _ = completion_logprobs(model, ids, attn, P, 1.0)
        ids1, attn1, _, cmask1, P1 = _tokenize(tok, [short], 256)
        alone, _ = completion_logprobs(model, ids1, attn1, P1, 1.0)
    n = int(cmask1.sum())
    assert torch.allclose(both[1, :n], alone[0, :n], atol=1e-5)


def test_grpo_pass_moves_probability_towards_rewarded_completions(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    batch = samples([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    st = GRPOSettings(lr=3e-3, ppo_epochs=3, mini_batch_size=12, micro_batch_size=4, beta=0.04, temperature=1.0)
    res = train_grpo(tiny_model_dir, batch, tmp_path / "out", st, ref_dir=tiny_model_dir)
    assert res.checkpoint_dir is not None and res.steps == 3 and res.kept == list(range(12))
    for k in ("train/reward_mean", "train/zero_variance_frac", "train/clip/region_frac", "train/kl/mean",
              "train/entropy/mean", "train/grad_norm", "train/completion_len_p90"):
        assert k in res.metrics
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)

    def mean_logprob(model_dir, good: bool):
        model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        pick = [s for s in batch if (s.reward > 0) == good]
        ids, attn, _, cmask, P = _tokenize(tok, pick, 256)
        with torch.no_grad():
            lp, _ = completion_logprobs(model, ids, attn, P, 1.0)
        return float((lp * cmask).sum() / cmask.sum())

    assert mean_logprob(res.checkpoint_dir, True) - mean_logprob(tiny_model_dir, True) > \
        mean_logprob(res.checkpoint_dir, False) - mean_logprob(tiny_model_dir, False)


def test_no_signal_saves_nothing(tiny_model_dir, tmp_path):
    res = train_grpo(tiny_model_dir, samples([[1.0, 1.0], [0.0, 0.0]]), tmp_path / "o", GRPOSettings())
    assert res.checkpoint_dir is None and res.metrics["train/zero_variance_frac"] == 1.0
    assert not (tmp_path / "o").exists()


def test_nan_aborts_before_saving(tiny_model_dir, tmp_path):
    st = GRPOSettings(lr=1e30, ppo_epochs=3, mini_batch_size=4, micro_batch_size=4, max_grad_norm=1e30)
    with pytest.raises(FloatingPointError, match="nothing was saved"):
        train_grpo(tiny_model_dir, samples([[1.0, 0.0, 0.0, 1.0]] * 3), tmp_path / "o", st)
    assert not (tmp_path / "o").exists()
