"""The GRPO pass on a tiny model: it learns from group advantages, guards, and aborts on NaN."""

import pytest
import torch

from ratchet.loop.config import GRPOConfig
from ratchet.loop.tasks.sources import chat_messages
from ratchet.loop.train.examples import ChatExample
from ratchet.loop.train.grpo import (
    GRPOLearner,
    GRPORun,
    GRPOSample,
    completion_logprobs,
    group_advantages,
    pack_rollouts,
    rollout_logprobs,
    rollout_module,
    train_grpo,
)


def plain_layout(tok, batch):
    """The plain left-padded forward's inputs: ids, attention mask, completion ids, completion mask, prompt width."""
    ids, attn, cmask, P = pack_rollouts(tok, batch, 256).full_layout(range(len(batch)))
    return ids, attn, ids[:, P:], cmask, P


def samples(rewards_by_group):
    out = []
    for g, rewards in enumerate(rewards_by_group):
        for i, r in enumerate(rewards):
            text = "Answer: 7" if r > 0 else f"Answer: {i + 1}"
            out.append(GRPOSample(g, ChatExample(chat_messages("sys", [], f"What is {g} + {7 - g}?"), text), r, False))
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
    long = GRPOSample(
        0, ChatExample(chat_messages("a much longer system prompt here", [], "What is 12 + 30?"), "Answer: 42"), 1.0, False
    )
    short = GRPOSample(0, ChatExample(chat_messages("sys", [], "1+1?"), "Answer: 2"), 1.0, False)
    with torch.no_grad():
        ids, attn, _, cmask, P = plain_layout(tok, [long, short])
        both, _, _ = completion_logprobs(model, ids, attn, P, 1.0)
        ids1, attn1, _, cmask1, P1 = plain_layout(tok, [short])
        alone, _, _ = completion_logprobs(model, ids1, attn1, P1, 1.0)
    n = int(cmask1.sum())
    assert torch.allclose(both[1, :n], alone[0, :n], atol=1e-5)


def test_grpo_pass_moves_probability_towards_rewarded_completions(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    batch = samples([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    st = GRPOConfig(lr=3e-3, ppo_epochs=3, mini_batch_size=12, micro_batch_size=4, beta=0.04)
    res = train_grpo(tiny_model_dir, batch, tmp_path / "out", st, GRPORun(temperature=1.0), ref_dir=tiny_model_dir)
    assert res.checkpoint_dir is not None and res.steps == 3 and res.kept == list(range(12))
    for k in (
        "train/reward_mean",
        "train/zero_variance_frac",
        "train/clip/region_frac",
        "train/kl/mean",
        "train/entropy/mean",
        "train/grad_norm",
        "train/completion_len_p90",
    ):
        assert k in res.metrics
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)

    def mean_logprob(model_dir, good: bool):
        model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        pick = [s for s in batch if (s.reward > 0) == good]
        ids, attn, _, cmask, P = plain_layout(tok, pick)
        with torch.no_grad():
            lp, _, _ = completion_logprobs(model, ids, attn, P, 1.0)
        return float((lp * cmask).sum() / cmask.sum())

    assert mean_logprob(res.checkpoint_dir, True) - mean_logprob(tiny_model_dir, True) > mean_logprob(
        res.checkpoint_dir, False
    ) - mean_logprob(tiny_model_dir, False)


def test_no_signal_saves_nothing(tiny_model_dir, tmp_path):
    res = train_grpo(tiny_model_dir, samples([[1.0, 1.0], [0.0, 0.0]]), tmp_path / "o", GRPOConfig())
    assert res.checkpoint_dir is None and res.metrics["train/zero_variance_frac"] == 1.0
    assert not (tmp_path / "o").exists()


def test_nan_aborts_before_saving(tiny_model_dir, tmp_path):
    st = GRPOConfig(lr=1e30, ppo_epochs=3, mini_batch_size=4, micro_batch_size=4, max_grad_norm=1e30)
    with pytest.raises(FloatingPointError, match="nothing was saved"):
        train_grpo(tiny_model_dir, samples([[1.0, 0.0, 0.0, 1.0]] * 3), tmp_path / "o", st)
    assert not (tmp_path / "o").exists()


def _fewshot_groups():
    """Three groups of uneven completions behind one long shared system/few-shot prefix (as in a round)."""
    shots = [("What is 2 + 2?", "2 + 2 = 4\nAnswer: 4"), ("What is 3 * 3?", "3 * 3 = 9\nAnswer: 9")]
    out = []
    for g, q in enumerate(["What is 1 + 6?", "What is 12 + 30?", "What is 5 * 5?"]):
        for i, text in enumerate(["Answer: 7", f"1 + {g} = {g + 1}. Answer: {g + 1}", "7", "Answer: 70 and some more words"]):
            out.append(
                GRPOSample(
                    g,
                    ChatExample(chat_messages("Solve it. End with 'Answer: <n>'.", shots, q), text),
                    float(i == 0),
                    truncated=(i == 3),
                )
            )
    return out


def test_shared_prompt_forward_equals_plain_forward(tiny_model_dir):
    """Prefix once, each prompt once, completions on the selected cache: same log-probs AND same gradients."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float64)
    batch = _fewshot_groups()
    packed = pack_rollouts(tok, batch, 256)
    assert len(packed.suffixes) == 3 and len(packed.prefix) > 20  # system prompt and shots are shared
    rows = [5, 0, 9, 1, 2, 11, 6]  # mixed groups, any order
    grads = []
    for shared in (True, False):
        model.zero_grad()
        lp, ent, _ = rollout_logprobs(model, packed, rows, 0.8, with_entropy=True, shared=shared)
        _, cmask = packed.completion_tensors(rows)
        (lp * cmask).sum().backward()
        grads.append(([p.grad.clone() for p in model.parameters()], lp.detach(), ent, cmask))
    (g1, lp1, e1, m), (g2, lp2, e2, _) = grads
    assert torch.allclose(lp1[m], lp2[m], atol=1e-10) and torch.allclose(e1[m], e2[m], atol=1e-10)
    for a, b in zip(g1, g2):  # float64: ~2e-8 of the largest entry (summation order); a wrong position gives ~1e-2
        assert float((a - b).abs().max()) <= 1e-6 * float(b.abs().max()) + 1e-12


def test_lora_and_gradient_checkpointing_pass_saves_a_plain_checkpoint(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    st = GRPOConfig(
        lr=1e-2,
        ppo_epochs=1,
        mini_batch_size=12,
        micro_batch_size=4,
        lora_r=4,
        lora_alpha=8,
        gradient_checkpointing=True,
    )
    res = train_grpo(
        tiny_model_dir,
        samples([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]]),
        tmp_path / "out",
        st,
        GRPORun(temperature=1.0),
    )
    assert res.steps == 1 and "train/kl_last" in res.metrics
    merged = AutoModelForCausalLM.from_pretrained(res.checkpoint_dir)  # no adapter files needed
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert not any("lora" in k for k in merged.state_dict())
    moved = [k for k, v in merged.state_dict().items() if not torch.equal(v, base.state_dict()[k])]
    assert moved and all("proj" in k for k in moved)  # only the adapted projections changed


def test_training_forward_gives_pi_old_of_a_one_step_pass(tiny_model_dir):
    """A pass of one optimizer step takes pi_old from the training forward (detached) instead of a no-grad pass
    (TRL's num_iterations = 1 shortcut); that holds only if the two forwards agree on every completion token."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    batch = samples([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    packed = pack_rollouts(AutoTokenizer.from_pretrained(tiny_model_dir), batch, 256)
    _, cmask = packed.completion_tensors(range(len(batch)))
    module = rollout_module(AutoModelForCausalLM.from_pretrained(tiny_model_dir), (packed, 1.0, True, cmask.shape[1], 1.0))
    for rows in ([0, 1, 2, 3], [4, 5, 6, 7], list(range(8))):
        module.eval()
        with torch.no_grad():
            old, _, _ = module(rows)
        module.train()
        lp, _, _ = module(rows, with_entropy=True)
        assert lp.requires_grad
        torch.testing.assert_close(lp.detach() * cmask[rows], old * cmask[rows], atol=1e-5, rtol=0)


@pytest.mark.parametrize("measure_kl", [True, False])
def test_kl_guard_measured_only_when_asked_at_beta_zero(tiny_model_dir, measure_kl):
    batch = samples([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    learner = GRPOLearner(tiny_model_dir, GRPOConfig(lr=1e-3, ppo_epochs=1, mini_batch_size=8, micro_batch_size=4, beta=0.0))
    first = learner.train_pass(batch, GRPORun(temperature=1.0, measure_kl=True))
    assert first.metrics["train/kl_last"] == pytest.approx(0.0, abs=1e-6)  # the policy still was the reference
    second = learner.train_pass(batch, GRPORun(temperature=1.0, seed=1, measure_kl=measure_kl))
    assert ("train/kl_last" in second.metrics) == measure_kl  # absent, never a fake 0, when not measured
    if measure_kl:
        assert second.metrics["train/kl_last"] > 0.0  # one update moved the policy off the reference
