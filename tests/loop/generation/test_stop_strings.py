"""``generation.stop``: sampling ends at a stop string, on the transformers backend (vLLM: test_vllm_backend.py)."""

from __future__ import annotations

from ratchet.loop.generation.sampling import SamplingParams, make_completion
from ratchet.loop.generation.transformers_backend import TransformersBackend
from ratchet.loop.tasks.sources import chat_messages

MSGS = [chat_messages("sys", [], f"What is {i} + {2 * i}?") for i in range(4)]


def test_a_stop_string_cuts_the_text_before_it_and_the_ids_through_it(tiny_model_dir):
    engine = TransformersBackend(tiny_model_dir, batch_size=4)
    plain = engine.generate(MSGS, SamplingParams(n=1, temperature=0.0, max_new_tokens=16))
    text = plain[0].text
    stop = text[4:6]  # a string the greedy completion writes, so it must end there
    assert stop and stop not in text[:4]
    got = engine.generate(MSGS, SamplingParams(n=1, temperature=0.0, max_new_tokens=16, stop=(stop,)))
    first = got[0]
    assert first.finish_reason == "stop_string" and first.text == text[: text.find(stop)]
    assert tuple(first.token_ids) == plain[0].token_ids[: len(first.token_ids)]  # what was sampled, no EOS added
    assert stop in engine.tokenizer.decode(list(first.token_ids)) and stop not in engine.tokenizer.decode(
        list(first.token_ids[:-1])
    )
    for p, g in zip(plain, got):  # the others: cut where they write it too, else unchanged
        assert g.text == (p.text[: p.text.find(stop)] if stop in p.text else p.text)
        assert g.finish_reason == ("stop_string" if stop in p.text else p.finish_reason)


def test_make_completion_keeps_the_sampler_logprobs_of_the_kept_ids(tiny_model_dir):
    tok = TransformersBackend(tiny_model_dir, batch_size=1).tokenizer
    ids = tok("Answer: 7\nQ: next one", add_special_tokens=False)["input_ids"]
    c = make_completion(tok, set(), 0, 0, ids, [1, 2], [-0.5] * len(ids), stop=("\nQ:",))
    assert c.finish_reason == "stop_string" and c.text == "Answer: 7"
    assert len(c.logprobs) == len(c.token_ids) < len(ids)
