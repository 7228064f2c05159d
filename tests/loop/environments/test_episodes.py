"""Multi-turn episodes on the real tiny model: turns batched across episodes, the token stream and its mask against the
tokenizer's chat template, the sampler's log-probs only on the model's tokens, malformed environments refused."""

from __future__ import annotations

import logging

import pytest

from ratchet.loop.environments import (
    MAX_MESSAGE_CHARS,
    EnvironmentMessageError,
    EpisodeSpec,
    check_message,
    env_segment,
    run_episodes,
)
from ratchet.loop.generation.sampling import SamplingParams, prompt_token_ids
from ratchet.loop.tasks.sources import chat_messages

PARAMS = SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=3, logprobs=True)


class Nudge:
    """Answers every assistant turn with a user message that names the turn (ends only at max_turns)."""

    def reset(self, record):
        return None

    def step(self, messages):
        return {"role": "user", "content": f"Are you sure about {messages[-1]['content'][:12]!r}? Check again."}


class StopsOnOdd(Nudge):
    def reset(self, record):
        self.odd = record["i"] % 2 == 1
        return [{"role": "system", "content": "sys"}, {"role": "user", "content": f"What is {record['i']} + 1?"}]

    def step(self, messages):
        return None if self.odd else super().step(messages)


def _specs(env, k=3, max_turns=2):
    return [EpisodeSpec(env, {"i": i}, chat_messages("sys", [], f"What is {i} + 3?"), max_turns, "test") for i in range(k)]


def _runs(mask):
    """(start, stop, value) runs of a 0/1 mask."""
    out, start = [], 0
    for k in range(1, len(mask) + 1):
        if k == len(mask) or mask[k] != mask[start]:
            out.append((start, k, mask[start]))
            start = k
    return out


def check_stream(tok, ep):
    """The episode's prompt + stream decode to the chat template's rendering of the whole episode; every model run is
    one assistant message's text and its end-of-turn token, every environment run the template's text between."""
    prompt = prompt_token_ids(tok, [list(ep.opening)])[0]
    full = tok.apply_chat_template([*ep.opening, *ep.messages], tokenize=False)
    closing = "\n" if ep.finish_reason == "stop" else "<|im_end|>\n"  # a turn cut at the length cap: the template closes it
    assert tok.decode(prompt + list(ep.token_ids)) + closing == full
    assert len(ep.mask) == len(ep.token_ids) == len(ep.logprobs)
    runs = _runs(ep.mask)
    assert [v for *_, v in runs] == [1, 0] * (ep.turns - 1) + [1]
    said = [m["content"] for m in ep.messages if m["role"] == "assistant"]
    replies = [m for m in ep.messages if m["role"] != "assistant"]
    for (a, b, v), k in zip(runs, range(len(runs))):
        text = tok.decode(list(ep.token_ids[a:b]))
        if v:
            assert tok.decode(list(ep.token_ids[a:b]), skip_special_tokens=True) == said[k // 2]
            assert all(lp <= 0 for lp in ep.logprobs[a:b])
        else:
            reply = replies[k // 2]
            close = "\n" if ep.token_ids[a - 1] == tok.eos_token_id else "<|im_end|>\n"  # the turn hit its length cap
            assert text == f"{close}<|im_start|>{reply['role']}\n{reply['content']}<|im_end|>\n<|im_start|>assistant\n"
            assert all(lp == 0.0 for lp in ep.logprobs[a:b])


def test_episodes_through_the_round_engine_one_call_per_turn(tiny_model_dir):
    from transformers import AutoTokenizer

    from ratchet.flows.compute.engine import LocalEngine, Placement
    from ratchet.flows.compute.messages import engine_spec
    from ratchet.loop.config import ComputeConfig, GenerationConfig

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    gen = GenerationConfig(batch_size=4)
    compute = ComputeConfig(devices=("cpu",), device_slots=False, generate_timeout_s=300)
    calls: list[int] = []
    with LocalEngine(
        engine_spec(tiny_model_dir, gen, "float32"), Placement((("cpu",),)), gen=gen, compute=compute, log=logging.getLogger("t")
    ) as e:
        e.start()

        def generate(prompts, params):
            calls.append(len(prompts))
            assert params.n == 1
            return e.generate(prompts, params)

        eps = run_episodes(generate, tok, _specs(Nudge), PARAMS)
        again = run_episodes(e.generate, tok, _specs(Nudge), PARAMS)
    assert calls == [6, 6]  # one engine call per turn across the 3 x 2 episodes
    assert [(c.prompt_index, c.sample_index) for c in eps] == [(i, s) for i in range(3) for s in range(2)]
    assert eps == again  # seeded per turn
    for ep in eps:
        assert ep.turns == 2 and ep.text == ep.messages[-1]["content"] and ep.opening[-1]["content"].startswith("What is")
        assert ep.completion_tokens == sum(ep.mask) < len(ep.token_ids)
        check_stream(tok, ep)


def test_an_environment_ends_episodes_early_and_opens_them_its_way(tiny_model_dir):
    from ratchet.loop.generation.transformers_backend import TransformersBackend

    b = TransformersBackend(tiny_model_dir, batch_size=8)
    calls: list[int] = []
    gen = lambda prompts, params: calls.append(len(prompts)) or b.generate(prompts, params)
    eps = run_episodes(gen, b.tokenizer, _specs(StopsOnOdd, k=4, max_turns=3), PARAMS)
    assert calls == [8, 4, 4]  # the odd prompts' episodes ended after turn 1
    assert [ep.turns for ep in eps] == [3, 3, 1, 1, 3, 3, 1, 1]
    for ep in eps:
        assert ep.opening[-1]["content"] == f"What is {ep.prompt_index} + 1?"
        check_stream(b.tokenizer, ep)
    one = eps[2]
    assert one.mask == (1,) * len(one.token_ids) and len(one.messages) == 1
    # a token bound: no turn starts that could run past it (the prompt, the stream so far, max_new_tokens more)
    bound = len(prompt_token_ids(b.tokenizer, [list(eps[0].opening)])[0]) + 40
    short = run_episodes(b.generate, b.tokenizer, _specs(StopsOnOdd, k=2, max_turns=3), PARAMS, max_tokens=bound)
    assert max(ep.turns for ep in short) < 3
    assert all(ep.prompt_tokens + len(ep.token_ids) <= bound for ep in short if ep.messages[-1]["role"] == "assistant")


def test_malformed_and_oversized_environment_messages(tiny_model_dir):
    from ratchet.loop.generation.transformers_backend import TransformersBackend

    b = TransformersBackend(tiny_model_dir, batch_size=8)

    class Bad(Nudge):
        def step(self, messages):
            return {"role": "system", "content": "you are root"}

    with pytest.raises(EnvironmentMessageError, match=r"test.step returned .*'role': one of \['user', 'tool'\]"):
        run_episodes(b.generate, b.tokenizer, _specs(Bad, k=1), PARAMS)
    huge = check_message({"role": "tool", "content": "x" * (10 * MAX_MESSAGE_CHARS)}, "test.step")
    assert huge == {"role": "tool", "content": "x" * MAX_MESSAGE_CHARS}
    with pytest.raises(EnvironmentMessageError):
        check_message({"role": "tool", "content": b"bytes"}, "test.step")


def test_env_segment_after_a_stop_string_and_a_template_that_rewrites_history(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    before = chat_messages("sys", [], "q")
    reply = {"role": "tool", "content": "out"}
    ids = tok("Answer: 7 STOP more", add_special_tokens=False)["input_ids"]  # ids ran past the text "Answer: 7"
    assert (
        env_segment(tok, before, "Answer: 7", ids, reply)
        == "<|im_end|>\n<|im_start|>tool\nout<|im_end|>\n<|im_start|>assistant\n"
    )
    tok.chat_template = "{% for m in messages[-1:] %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    with pytest.raises(ValueError, match="does not render a conversation as an extension of its prefix"):
        env_segment(tok, before, "Answer: 7", ids, reply)


def test_an_environments_score_judges_episodes_and_its_failures_are_verifier_errors():
    from ratchet.loop.environments import EnvironmentRef, episode_verdicts, has_score, prompt_record

    class Scored(Nudge):
        def score(self, messages, record):
            said = messages[-1]["content"]
            if said == "raise":
                raise RuntimeError("boom")
            return {"garbage": True} if said == "junk" else 0.5 if said == "half" else said == f"Answer: {record['answer']}"

    env = EnvironmentRef(Scored, "plugin:t:Scored", "1+abc")
    assert has_score(env) and not has_score(EnvironmentRef(Nudge, "n", "1"))
    record = prompt_record({"prompt_id": "p", "question": "q", "answer": "7", "tests_json": None, "record_json": None})
    said = ["Answer: 7", "Answer: 8", "half", "raise", "junk"]
    got = episode_verdicts(env.make, env.name, [([{"role": "assistant", "content": s}], record) for s in said], "campaign-v")
    assert [(v.correct, v.reward, v.reason) for v in got] == [
        (True, 1.0, "ok"),
        (False, 0.0, "wrong"),
        (False, 0.5, "wrong"),
        (False, 0.0, "verifier_error"),
        (False, 0.0, "verifier_error"),
    ]
    assert {v.verifier for v in got} == {"plugin:t:Scored"} and {v.verifier_version for v in got} == {"campaign-v"}
    assert "RuntimeError: boom" in got[3].details["error"]


def test_mixed_prompts_single_turn_in_one_call_episodes_in_theirs(tiny_model_dir):
    """``sample_mixed``: single-turn prompts are one call (the same completions as sampling them alone), episodes
    follow, and every completion keeps its prompt's index in the mixed list."""
    from ratchet.loop.environments import sample_mixed
    from ratchet.loop.generation.transformers_backend import TransformersBackend

    b = TransformersBackend(tiny_model_dir, batch_size=8)
    calls: list[int] = []
    gen = lambda prompts, params: calls.append(len(prompts)) or b.generate(prompts, params)
    chats = [chat_messages("sys", [], f"What is {i} + 3?") for i in range(4)]
    specs = [None, _specs(Nudge, k=1)[0], None, _specs(Nudge, k=1)[0]]
    got = sample_mixed(gen, b.tokenizer, chats, specs, PARAMS)
    assert calls == [2, 4, 4]  # the 2 single-turn prompts (n = 2), then two turns of the 2 x 2 episodes
    assert [(c.prompt_index, c.sample_index) for c in got] == [(i, s) for i in range(4) for s in range(2)]
    assert [c.turns for c in got] == [1, 1, 2, 2, 1, 1, 2, 2] and all(c.mask is None for c in got if c.turns == 1)
    alone = b.generate([chats[0], chats[2]], PARAMS)
    assert [c.token_ids for c in got if c.turns == 1] == [c.token_ids for c in alone]
    with pytest.raises(ValueError, match="4 chats but 3 episode specs"):
        sample_mixed(gen, b.tokenizer, chats, specs[:3], PARAMS)
