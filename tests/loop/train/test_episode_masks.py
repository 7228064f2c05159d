"""A multi-turn episode trains only on the model's own tokens: RFT labels and GRPO's loss and sampler log-probs skip
the environment's tokens between turns (``completion_mask``), and the verifier's read span does not cut the stream."""

from __future__ import annotations

import pytest

from ratchet.loop.environments import env_segment
from ratchet.loop.train.examples import ChatExample, completion_token_ids, loss_mask
from ratchet.loop.train.grpo import GRPOSample
from ratchet.loop.train.grpo.batch import pack_rollouts
from ratchet.loop.train.sft import IGNORE_INDEX, tokenize_example

CHAT = [{"role": "system", "content": "sys"}, {"role": "user", "content": "What is 3 + 4?"}]


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def episode(tok, first: str, second: str, reply: str = "Are you sure?") -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The token stream and mask of a scripted 2-turn episode, laid out as the episode runner lays it out."""
    a = tok(first, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    seg = env_segment(tok, CHAT, first, a, {"role": "user", "content": reply})
    e = tok(seg, add_special_tokens=False)["input_ids"]
    b = tok(second, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    return tuple(a + e + b), tuple([1] * len(a) + [0] * len(e) + [1] * len(b))


def test_rft_labels_only_the_models_tokens_and_the_environments_carry_no_gradient(tok, tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    from ratchet.loop.train.sft import completion_nll

    ids, mask = episode(tok, "Answer: 6", "Answer: 7")
    ex = ChatExample(CHAT, "Answer: 7", ids, read_chars=3, completion_mask=mask)  # read_chars: the final message's
    assert completion_token_ids(tok, ex) == list(ids) and loss_mask(tok, ex) == list(mask)  # the stream is kept whole
    inputs, labels = tokenize_example(tok, ex, max_seq_len=512)
    p = len(inputs) - len(ids)
    assert inputs[p:] == list(ids)
    assert [y != IGNORE_INDEX for y in labels[p:]] == [bool(m) for m in mask] and set(labels[:p]) == {IGNORE_INDEX}
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    logits = model(torch.tensor([inputs])).logits  # (1, T, V) float32
    logits.retain_grad()
    completion_nll(logits, torch.tensor([labels])).backward()
    grad = logits.grad[0].abs().sum(-1)  # (T,): position t predicts token t + 1
    predicts_env = [p + k - 1 for k, m in enumerate(mask) if not m]
    predicts_model = [p + k - 1 for k, m in enumerate(mask) if m]
    assert float(grad[predicts_env].max()) == 0.0 and float(grad[predicts_model].min()) > 0.0


def _samples(tok, env_lp: float, masked: bool = True):
    good, good_mask = episode(tok, "Answer: 6", "Answer: 7")
    bad, bad_mask = episode(tok, "Answer: 5", "Answer: 9", reply="Check it.")
    out = []
    for g, (ids, mask, reward) in enumerate([(good, good_mask, 1.0), (bad, bad_mask, 0.0)]):
        lp = tuple(-0.5 if m else env_lp for m in mask)
        ex = ChatExample(CHAT, "Answer", ids, read_chars=2, completion_mask=mask if masked else None)
        out.append(GRPOSample(0, ex, reward, False, sampler_logprobs=lp))
    return out


def test_grpo_packs_the_mask_and_ignores_the_read_span_of_an_episode(tok):
    samples = _samples(tok, 0.0)
    packed = pack_rollouts(tok, samples, max_seq_len=512)
    assert packed.completions[0] == list(samples[0].example.completion_ids) and packed.unread_tokens == 0
    _, attend = packed.completion_tensors([0, 1])
    model = packed.model_token_mask([0, 1], attend.shape[1])
    for i, s in enumerate(samples):
        n = len(s.example.completion_ids)
        assert attend[i, :n].all() and model[i, :n].tolist() == [bool(m) for m in s.example.completion_mask]


def test_grpo_pass_is_blind_to_the_environments_tokens_log_probs(tiny_model_dir, tmp_path):
    """The same pass with the environment tokens' stored sampler log-probs changed (0 vs -30) gives the same weights:
    neither the loss nor the sampler correction reads them; without the mask they are trained on and weights differ."""
    from transformers import AutoTokenizer

    from ratchet.loop.config import GRPOConfig
    from ratchet.loop.train.data_parallel import max_rel_param_diff
    from ratchet.loop.train.grpo import GRPOLearner, GRPORun

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    s = GRPOConfig(lr=3e-4, mini_batch_size=2, micro_batch_size=2, sampler_correction="tis")
    run = GRPORun(temperature=1.0, max_completion_length=32, seed=3)
    saved = []
    for k, (lp, masked) in enumerate([(0.0, True), (-30.0, True), (0.0, False)]):
        learner = GRPOLearner(tiny_model_dir, s, ref_dir=tiny_model_dir)
        learner.train_pass(_samples(tok, lp, masked), run)
        learner.save(tmp_path / f"p{k}")
        saved.append(tmp_path / f"p{k}")
    assert max_rel_param_diff(saved[0], saved[1], tiny_model_dir) == 0.0
    assert max_rel_param_diff(saved[0], saved[2], tiny_model_dir) > 1e-6
