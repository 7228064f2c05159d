"""GRPO and SFT train on the token ids the engine sampled, scored on the sampler's support (SmolLM2's tokenizer)."""

from __future__ import annotations

import pytest
import torch

from ratchet.loop.config import GRPOConfig
from ratchet.loop.generation.sampling import SamplingParams, prompt_ids_hash, render_prompt
from ratchet.loop.tasks.sources import chat_messages
from ratchet.loop.train.examples import ChatExample
from ratchet.loop.train.grpo import GRPOLearner, GRPORun, GRPOSample, pack_rollouts, rollout_logprobs
from ratchet.loop.train.sft import tokenize_example

TEMPERATURE = 1.2  # the GRPO rollout default


def _round_trips(tok, ids: list[int]) -> bool:
    return tok(tok.decode(ids, skip_special_tokens=True), add_special_tokens=False)["input_ids"] == ids


def test_decode_encode_is_not_the_identity_and_packing_keeps_the_sampled_ids(smollm2_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    canonical = tok("The answer is 42", add_special_tokens=False)["input_ids"]  # ... " answer" (one token) ...
    split = tok("The", add_special_tokens=False)["input_ids"] + tok(" ", add_special_tokens=False)["input_ids"]
    split += tok("answer is 42", add_special_tokens=False)["input_ids"]  # ... " " "answer": a sampler can emit this
    assert tok.decode(split) == tok.decode(canonical) and split != canonical  # same text, other tokens
    assert not _round_trips(tok, split) and _round_trips(tok, canonical)
    msgs = chat_messages("sys", [], "What is 12 + 30? Say 'The answer is'.")
    sample = GRPOSample(0, ChatExample(msgs, tok.decode(split), tuple(split + [tok.eos_token_id])), 1.0, False)
    packed = pack_rollouts(tok, [sample], 256)
    assert packed.completions[0] == split + [tok.eos_token_id] and packed.retokenized == 0
    old_store = GRPOSample(0, ChatExample(msgs, tok.decode(split)), 1.0, False)  # a row without stored ids
    assert pack_rollouts(tok, [old_store], 256).completions[0] == canonical + [tok.eos_token_id]
    assert pack_rollouts(tok, [old_store], 256).retokenized == 1
    # SFT (the RFT demo) trains on the sampled ids; where the text round-trips they are the ids it trained on before
    ids, labels = tokenize_example(tok, ChatExample(msgs, "", tuple(split + [tok.eos_token_id])), 256)
    assert [t for t in labels if t != -100] == split + [tok.eos_token_id]
    before = tokenize_example(tok, ChatExample(msgs, tok.decode(canonical)), 256)
    assert tokenize_example(tok, ChatExample(msgs, tok.decode(canonical), tuple(canonical + [tok.eos_token_id])), 256) == before
    truncated = tokenize_example(tok, ChatExample(msgs, tok.decode(canonical), tuple(canonical)), 256)
    assert truncated == before  # a completion that did not stop still learns to stop, as before


@pytest.fixture(scope="module")
def shared_engine(smollm2_dir):
    """SmolLM2 as a GRPO learner and a transformers engine that generates from the learner's own module."""
    from ratchet.loop.generation.transformers_backend import TransformersBackend

    learner = GRPOLearner(smollm2_dir, GRPOConfig(lr=1e-6, mini_batch_size=16, micro_batch_size=8))
    engine = TransformersBackend(smollm2_dir, batch_size=16)
    assert engine.share_module(learner.policy_module())
    return learner, engine


def _rollouts(learner, engine, top_p: float):
    msgs = [chat_messages("You are a helpful assistant.", [], f"What is {i} + {2 * i + 3}?") for i in range(4)]
    params = SamplingParams(n=2, temperature=TEMPERATURE, top_p=top_p, max_new_tokens=24, seed=1, logprobs=True)
    comps = engine.generate(msgs, params)
    assert all(len(c.logprobs) == len(c.token_ids) for c in comps)
    ids = learner.tok([render_prompt(learner.tok, m) for m in msgs], add_special_tokens=False)["input_ids"]
    assert [c.prompt_hash for c in comps] == [prompt_ids_hash(ids[c.prompt_index]) for c in comps]
    return [
        GRPOSample(
            c.prompt_index,
            ChatExample(msgs[c.prompt_index], c.text, c.token_ids),
            float(c.sample_index % 2),
            c.finish_reason == "length",
            c.logprobs,
            c.prompt_hash,
        )
        for c in comps
    ]


@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_grpo_logprobs_are_the_samplers_when_the_engine_is_the_learners_module(shared_engine, top_p):
    learner, engine = shared_engine
    samples = _rollouts(learner, engine, top_p)
    tok = learner.tok
    stripped = [list(x.example.completion_ids[:-1] if not x.truncated else x.example.completion_ids) for x in samples]
    if top_p == 1.0:  # among these 8 samples (seeded), some that BPE would not re-encode as sampled
        assert sum(not _round_trips(tok, ids) for ids in stripped) >= 1
    packed = pack_rollouts(tok, samples, 512)
    assert packed.completions == [list(x.example.completion_ids) for x in samples] and packed.prompt_mismatches == 0
    rows = list(range(len(samples)))
    with torch.no_grad():  # the GRPO loss's forward (shared-prompt path) on the stored ids
        lp, _, on_support = rollout_logprobs(learner.policy_module().eval(), packed, rows, TEMPERATURE, top_p=top_p)
    _, mask = packed.completion_tensors(rows)
    sampler = packed.sampler_tensor(rows, mask.shape[1])
    if top_p == 1.0:
        assert on_support is None
        assert float((lp - sampler)[mask].abs().max()) < 1e-3  # the same module: rounding of batch shapes only
        return
    gap = (on_support - sampler)[mask]
    assert float(gap.abs().max()) < 1e-3
    ratio_on_support, ratio_full = float(gap.exp().mean()), float((lp - sampler)[mask].exp().mean())
    print(f"top_p={top_p}: ratio on the nucleus {ratio_on_support:.6f}, full vocabulary {ratio_full:.4f}")
    assert ratio_on_support == pytest.approx(1.0, abs=1e-3)  # centred on 1
    assert ratio_full < 0.98  # the full-vocabulary log-softmax carries the kept mass as a bias (trl#6789)


@pytest.mark.parametrize(("engine_shared", "correction"), [(False, "tis"), (True, "none")])
def test_pass_measures_the_sampler_gap_per_step_and_corrects_only_a_foreign_engine(tiny_model_dir, engine_shared, correction):
    """Sampler log-probs 0.2 nats below the trainer's on every token: the step metrics say so, and 'auto' turns TIS on
    only when the rollouts did not come from the learner's own module."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    learner = GRPOLearner(tiny_model_dir, GRPOConfig(lr=1e-3, mini_batch_size=4, micro_batch_size=2))
    msgs = [chat_messages("sys", [], f"What is {g} + 1?") for g in range(2)]
    texts = ["Answer: 7", "Answer: 1", "Answer: 2", "no idea"]
    plain = [
        GRPOSample(
            g, ChatExample(msgs[g], t, tuple(tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])), r, False
        )
        for g in range(2)
        for t, r in zip(texts[2 * g : 2 * g + 2], (1.0, 0.0))
    ]
    packed = pack_rollouts(tok, plain, 256)
    with torch.no_grad():
        lp, _, _ = rollout_logprobs(learner.policy_module().eval(), packed, range(4), 1.0)
    samples = [
        GRPOSample(x.group, x.example, x.reward, x.truncated, tuple((lp[i, : len(c)] - 0.2).tolist()))
        for i, (x, c) in enumerate(zip(plain, packed.completions))
    ]
    res = learner.train_pass(samples, GRPORun(temperature=1.0, engine_shared=engine_shared))
    m = res.metrics
    assert m["train/sampler_correction"] == correction
    assert m["train/sampler/logp_diff_mean"] == pytest.approx(0.2, abs=1e-4)
    assert m["train/sampler/logp_diff_max"] == pytest.approx(0.2, abs=1e-4)
    assert m["train/sampler/logp_diff_frac"] == 1.0  # every token above the 0.1-nat threshold
    lengths = sorted(len(c) for c in packed.completions)
    assert m["train/sampler/seq_ratio_min"] == pytest.approx(torch.tensor(0.2 * lengths[0]).exp().item(), rel=1e-3)
    assert m["train/sampler/seq_ratio_max"] == pytest.approx(torch.tensor(0.2 * lengths[-1]).exp().item(), rel=1e-3)
    assert m["train/sampler_gap_last"] == pytest.approx(0.2, abs=1e-4)
    assert ("train/sampler/is_weight_mean" in m) == (correction == "tis")
    if correction == "tis":
        assert m["train/sampler/is_weight_mean"] == pytest.approx(torch.tensor(0.2).exp().item(), rel=1e-3)


@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_requesting_sampler_logprobs_never_changes_the_sampled_tokens(tiny_model_dir, top_p):
    from ratchet.loop.generation.transformers_backend import TransformersBackend

    engine = TransformersBackend(tiny_model_dir, batch_size=4)
    msgs = [chat_messages("sys", [], f"What is {i} + 2?") for i in range(3)]
    runs = [
        engine.generate(msgs, SamplingParams(n=2, temperature=TEMPERATURE, top_p=top_p, max_new_tokens=12, seed=5, logprobs=lp))
        for lp in (False, True)
    ]
    assert [c.token_ids for c in runs[0]] == [c.token_ids for c in runs[1]]
    assert all(c.logprobs is None for c in runs[0])
    assert all(len(c.logprobs) == len(c.token_ids) and max(c.logprobs) <= 0 for c in runs[1])
