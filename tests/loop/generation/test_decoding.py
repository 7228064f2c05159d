"""Ratchet's decode loop (``ratchet.loop.generation.decoding``) against transformers' own ``generate`` and cache."""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from ratchet.loop.generation.decoding import PreallocatedLayer, sdpa_gqa_attention
from ratchet.loop.generation.sampling import SamplingParams, prompt_token_ids
from ratchet.loop.generation.transformers_backend import TransformersBackend
from ratchet.loop.tasks.sources import ArithmeticTasks, chat_messages


def _plain_generate(backend: TransformersBackend, msgs, max_new: int) -> list[list[int]]:
    """What a transformers user writes: one left-padded batch through ``model.generate``, greedy, plain SDPA."""
    ids = prompt_token_ids(backend.tokenizer, msgs)
    width = max(map(len, ids))
    x = torch.full((len(ids), width), backend.tokenizer.pad_token_id)
    m = torch.zeros((len(ids), width), dtype=torch.long)
    for k, r in enumerate(ids):
        x[k, width - len(r) :], m[k, width - len(r) :] = torch.tensor(r), 1
    backend.model.set_attn_implementation("sdpa")
    try:
        with torch.inference_mode():
            seqs = backend.model.generate(input_ids=x, attention_mask=m, max_new_tokens=max_new, do_sample=False,
                                          pad_token_id=backend.tokenizer.pad_token_id, eos_token_id=sorted(backend.eos_ids))  # fmt: skip
    finally:
        backend.model.set_attn_implementation("ratchet_sdpa_gqa")
    out = []
    for row in seqs[:, width:].tolist():
        end = next((k + 1 for k, t in enumerate(row) if t in backend.eos_ids), len(row))
        out.append(row[:end])
    return out


def _demo_chats(n: int, seed: int):
    src = ArithmeticTasks(("sum_small", "sum_2digit", "product_1digit", "linear_equation"))
    return [
        chat_messages("Give the final line as 'Answer: <number>'.", src.fewshot(2), p.question)
        for p in src.draw(n, "heldout", seed)
    ]


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_greedy_tokens_equal_plain_generate_on_the_real_model(smollm2_dir, prefix_cache):
    """SmolLM2 on demo-style chats: rows stop at different steps (they leave the batch), the shared prefix is cached."""
    msgs = _demo_chats(12, 5)
    backend = TransformersBackend(smollm2_dir, batch_size=12, prefix_cache=prefix_cache)
    got = backend.generate(msgs, SamplingParams(n=1, temperature=0.0, max_new_tokens=24))
    want = _plain_generate(backend, msgs, 24)
    assert [list(c.token_ids) for c in got] == want
    assert len({len(w) for w in want}) > 1  # some rows finished before others


def test_greedy_tokens_equal_plain_generate_when_most_rows_stop_early(tiny_model_dir):
    """The tiny model answers 'Answer: 7' and stops: most rows finish together and the batch is compacted."""
    msgs = [chat_messages("sys", [], f"What is {i} + {3 * i}?" + " Please." * (i % 4)) for i in range(9)]
    backend = TransformersBackend(tiny_model_dir, batch_size=9)
    got = backend.generate(msgs, SamplingParams(n=1, temperature=0.0, max_new_tokens=20))
    assert [list(c.token_ids) for c in got] == _plain_generate(backend, msgs, 20)


def test_sampled_logprobs_are_the_processed_distribution_of_a_fresh_forward(tiny_model_dir):
    """Each sampled token's log-prob = log softmax(logits / T, top-p) of a forward pass over prompt + completion."""
    from ratchet.loop.generation.transformers_backend import _sampling_processors

    backend = TransformersBackend(tiny_model_dir, batch_size=4)
    msgs = [chat_messages("sys", [], f"What is {i} + 2?") for i in range(3)]
    params = SamplingParams(n=2, temperature=1.7, top_p=0.9, max_new_tokens=10, seed=3, logprobs=True)
    procs, prompts = _sampling_processors(params), prompt_token_ids(backend.tokenizer, msgs)
    for c in backend.generate(msgs, params):
        prompt = prompts[c.prompt_index]
        ids = torch.tensor([prompt + list(c.token_ids)])
        with torch.inference_mode():
            logits = backend.model(ids).logits[0, len(prompt) - 1 : -1].float()  # (T, V)
        want = [torch.log_softmax(procs(ids, row[None])[0], -1)[t].item() for row, t in zip(logits, c.token_ids)]
        assert c.logprobs == pytest.approx(want, abs=1e-4)


def test_a_preallocated_layer_holds_what_a_dynamic_layer_holds():
    torch.manual_seed(0)
    ours, theirs = PreallocatedLayer(capacity=16), DynamicLayer()
    for n in (5, 1, 1):
        k, v = torch.randn(4, 3, n, 8), torch.randn(4, 3, n, 8)
        a, b = ours.update(k, v), theirs.update(k, v)
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    keep = torch.tensor([0, 2, 3])
    ours.batch_select_indices(keep)
    theirs.batch_select_indices(keep)
    k, v = torch.randn(3, 3, 1, 8), torch.randn(3, 3, 1, 8)
    a, b = ours.update(k, v), theirs.update(k, v)
    assert ours.get_seq_length() == theirs.get_seq_length() == 8 and all(torch.equal(x, y) for x, y in zip(a, b))
    ours.update(torch.randn(3, 3, 10, 8), torch.randn(3, 3, 10, 8))  # past the capacity: it grows
    assert ours.get_seq_length() == 18 and torch.equal(ours.keys[:, :, :8], a[0])


@pytest.mark.parametrize("q_len", [1, 5])
def test_grouped_query_attention_equals_transformers_sdpa(q_len):
    torch.manual_seed(1)

    class Module:
        num_key_value_groups, is_causal = 3, True

    q, k, v = torch.randn(2, 9, q_len, 16), torch.randn(2, 3, 12, 16), torch.randn(2, 3, 12, 16)
    mask = torch.ones(2, 1, q_len, 12, dtype=torch.bool)
    mask[0, :, :, :4] = False  # a left-padded row
    mask[:, :, :, 12 - q_len :] &= torch.ones(q_len, q_len, dtype=torch.bool).tril()
    got, _ = sdpa_gqa_attention(Module(), q, k, v, mask, scaling=0.25)
    want, _ = sdpa_attention_forward(Module(), q, k, v, mask, scaling=0.25)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
