"""VLLMBackend on the real SmolLM2-135M: record shape, and greedy equivalence with TransformersBackend.

Needs vLLM (``/work/vllm-venv`` on CPU); skipped where it is not installed. One engine per module:
loading takes ~40 s on 2 cores. The engine core runs in a forked child process, which is safe under
pytest because nothing here has initialised CUDA or started threads vLLM cares about.
"""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("RATCHET_REQUIRE_VLLM"):
    import vllm  # noqa: F401 - the vLLM CI environment (.ci/run) must run these tests, not skip them
else:
    pytest.importorskip("vllm", reason="needs vLLM in its own venv (docs/devices.md; CI: .venv-vllm-ci in .ci/run)")

from ratchet.loop.generation.sampling import SamplingParams  # noqa: E402
from ratchet.loop.generation.transformers_backend import TransformersBackend  # noqa: E402
from ratchet.loop.generation.vllm_backend import VLLMBackend  # noqa: E402
from ratchet.loop.tasks.sources import ArithmeticTasks, chat_messages  # noqa: E402

pytestmark = pytest.mark.slow

SYSTEM = "Solve the arithmetic problem. Show the calculation, then give the final line as 'Answer: <number>'."


def arithmetic_chats(n: int, seed: int = 11) -> list[list[dict[str, str]]]:
    """``n`` fixed held-out arithmetic prompts with the demo's two worked examples."""
    src = ArithmeticTasks(("sum_small", "sum_2digit", "product_1digit", "linear_equation"))
    return [chat_messages(SYSTEM, src.fewshot(2), p.question) for p in src.draw(n, "heldout", seed)]


@pytest.fixture(scope="module")
def vllm_backend(smollm2_dir):
    b = VLLMBackend(smollm2_dir, batch_size=64)
    yield b
    b.close()


def test_records_well_formed_ordered_and_grouped(vllm_backend):
    msgs = arithmetic_chats(5)
    seen: list[tuple[int, int]] = []
    out = vllm_backend.generate(
        msgs, SamplingParams(n=3, temperature=0.8, max_new_tokens=20), progress=lambda done, total: seen.append((done, total))
    )
    assert [(c.prompt_index, c.sample_index) for c in out] == [(p, s) for p in range(5) for s in range(3)]
    prompt_lens = [len(vllm_backend.tokenizer(vllm_backend.render(m))["input_ids"]) for m in msgs]
    for c in out:
        assert c.prompt_tokens == prompt_lens[c.prompt_index] > 90  # system + 2 shots + question
        assert 1 <= c.completion_tokens <= 20
        stopped = c.token_ids[-1] in vllm_backend.eos_ids
        assert c.finish_reason == ("stop" if stopped else "length")
        assert c.finish_reason == "stop" or c.completion_tokens == 20
        assert not any(t in vllm_backend.eos_ids for t in c.token_ids[:-1])  # nothing after an EOS
        assert c.text == vllm_backend.tokenizer.decode(list(c.token_ids), skip_special_tokens=True)
    assert any(c.finish_reason == "stop" for c in out) and any(c.finish_reason == "length" for c in out)
    assert seen and seen[-1] == (15, 15)


def test_greedy_tokens_match_transformers_backend(vllm_backend, smollm2_dir):
    """Greedy float32: both backends emit identical completions on >= 95% of 32 prompts (and same prompt lengths)."""
    msgs = arithmetic_chats(32)
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=24)
    ours = vllm_backend.generate(msgs, params)
    hf = TransformersBackend(smollm2_dir, batch_size=16).generate(msgs, params)
    assert [c.prompt_tokens for c in ours] == [c.prompt_tokens for c in hf]
    same = [a.token_ids == b.token_ids for a, b in zip(ours, hf)]
    assert sum(same) / len(same) >= 0.95, [(a.text, b.text) for a, b, s in zip(ours, hf, same) if not s]
    for a, b, s in zip(ours, hf, same):
        if s:
            assert (a.text, a.finish_reason) == (b.text, b.finish_reason)


def test_a_shard_of_the_jobs_keeps_global_indices_and_greedy_outputs(vllm_backend):
    """Data-parallel workers each run ``jobs=`` of whole prompts; their outputs merge into the whole call's."""
    from ratchet.loop.generation.sampling import shard_jobs

    msgs = arithmetic_chats(9)
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=16)
    whole = vllm_backend.generate(msgs, params)
    shards = shard_jobs(9, 1, 2, 1)
    parts = [vllm_backend.generate(msgs, params, jobs=r) for r in shards]
    assert [[c.prompt_index for c in part] for part in parts] == [list(r) for r in shards]
    merged = [c for part in parts for c in part]
    same = sum(a.token_ids == b.token_ids for a, b in zip(merged, whole))
    assert same >= 8, [(a.text, b.text) for a, b in zip(merged, whole) if a.token_ids != b.token_ids]
    with pytest.raises(ValueError, match="multiples of 3"):
        vllm_backend.generate(msgs, SamplingParams(n=3, temperature=0.8, max_new_tokens=4), jobs=range(0, 4))


@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_processed_logprobs_match_the_trainers_on_the_samplers_support(vllm_backend, smollm2_dir, top_p):
    """vLLM's processed log-probs of its sampled tokens against the GRPO trainer's forward (fp32, SmolLM2): they
    line up, with top_p < 1 once the trainer renormalises over the nucleus (the mismatch vLLM vs transformers)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ratchet.loop.train.examples import ChatExample
    from ratchet.loop.train.grpo import GRPOSample, pack_rollouts, rollout_logprobs

    msgs = arithmetic_chats(4)
    comps = vllm_backend.generate(msgs, SamplingParams(n=2, temperature=1.2, top_p=top_p, max_new_tokens=16, logprobs=True))
    assert all(c.logprobs is not None and len(c.logprobs) == len(c.token_ids) for c in comps)
    samples = [
        GRPOSample(c.prompt_index, ChatExample(msgs[c.prompt_index], c.text, c.token_ids), 0.0, False, c.logprobs) for c in comps
    ]
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    packed = pack_rollouts(tok, samples, 1024)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir).eval()
    with torch.no_grad():
        lp, _, sup = rollout_logprobs(model, packed, range(len(samples)), 1.2, top_p=top_p)
    _, mask = packed.completion_tensors(range(len(samples)))
    gap = ((sup if sup is not None else lp) - packed.sampler_tensor(range(len(samples)), mask.shape[1]))[mask]
    gap = gap[~torch.isnan(gap)]
    print(f"vLLM vs trainer, top_p={top_p}: mean |d| {gap.abs().mean():.2e}, max {gap.abs().max():.2e}")
    assert float(gap.abs().mean()) < 1e-2 and float(gap.exp().mean()) == pytest.approx(1.0, abs=2e-2)


def test_a_stop_string_ends_sampling_where_the_transformers_backend_ends_it(vllm_backend, smollm2_dir):
    """``generation.stop`` on vLLM: the completion ends at the stop string (``stop_string``), its text before it and
    its ids through it; where both backends decode the same greedy tokens, the same completion as transformers'."""
    msgs = arithmetic_chats(6)
    plain_params = SamplingParams(n=1, temperature=0.0, max_new_tokens=24)
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=24, stop=("Answer",))
    plain, got = vllm_backend.generate(msgs, plain_params), vllm_backend.generate(msgs, params)
    hf = TransformersBackend(smollm2_dir, batch_size=8)
    hf_plain, want = hf.generate(msgs, plain_params), hf.generate(msgs, params)
    for p, g in zip(plain, got):
        if "Answer" in p.text:
            assert g.finish_reason == "stop_string" and g.text == p.text[: p.text.find("Answer")]
            assert tuple(g.token_ids) == tuple(p.token_ids[: len(g.token_ids)])
        else:
            assert (g.text, g.finish_reason) == (p.text, p.finish_reason)
    for p, hp, g, w in zip(plain, hf_plain, got, want):
        if p.token_ids == hp.token_ids:
            assert (g.text, g.finish_reason, g.token_ids) == (w.text, w.finish_reason, w.token_ids)
    assert any(g.finish_reason == "stop_string" for g in got)


def test_update_weights_in_place_gives_the_saved_policys_greedy_tokens(vllm_backend, smollm2_dir, tmp_path):
    """A learner's new weights (a state dict with SmolLM2's tied embeddings) loaded into the running engine give the
    greedy tokens of the saved policy: vLLM repacks its CPU weights after loading, so this goes through its in-place
    reload. The reference is the transformers backend on the saved folder (greedy-equal to vLLM, tested above)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policy = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a policy a few updates away: its greedy tokens differ from the base's on some prompts
        for p in policy.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * float(p.std()) * 0.05)
    policy.save_pretrained(tmp_path / "policy")
    AutoTokenizer.from_pretrained(smollm2_dir).save_pretrained(tmp_path / "policy")
    chats, params = arithmetic_chats(12), SamplingParams(n=1, temperature=0.0, max_new_tokens=16)
    before = [c.token_ids for c in vllm_backend.generate(chats, params)]
    vllm_backend.update_weights(policy.state_dict())
    assert vllm_backend.sync_route == "file"  # one /dev/shm file (9x faster than bytes through vLLM's RPC here)
    after = [c.token_ids for c in vllm_backend.generate(chats, params)]
    saved = [c.token_ids for c in TransformersBackend(tmp_path / "policy", batch_size=12).generate(chats, params)]
    assert after != before
    assert after == saved
    vllm_backend.update_weights(smollm2_dir)  # a checkpoint folder: each worker reads it (the module's engine is shared)
    assert vllm_backend.sync_route == "checkpoint" and [c.token_ids for c in vllm_backend.generate(chats, params)] == before


def test_episodes_on_vllm_feed_each_turn_as_token_ids(vllm_backend):
    """Multi-turn episodes on vLLM (``TokenPrompt`` prompts): every episode takes two turns, the stream and its mask
    pair up, the model's tokens are exactly its turns' text and the environment's decode to the template's text."""
    from ratchet.loop.environments import EpisodeSpec, run_episodes

    class Again:
        def reset(self, record):
            return None

        def step(self, messages):
            return {"role": "user", "content": "Check it again."}

    tok = vllm_backend.tokenizer
    specs = [EpisodeSpec(Again, {}, m, 2) for m in arithmetic_chats(3)]
    eps = run_episodes(vllm_backend.generate, tok, specs, SamplingParams(n=2, temperature=0.8, max_new_tokens=12, logprobs=True))
    assert [(c.prompt_index, c.sample_index) for c in eps] == [(p, s) for p in range(3) for s in range(2)]
    for ep in eps:
        assert ep.turns == 2 and len(ep.mask) == len(ep.token_ids) == len(ep.logprobs)
        said = [m["content"] for m in ep.messages if m["role"] == "assistant"]
        assert tok.decode([t for t, m in zip(ep.token_ids, ep.mask) if m], skip_special_tokens=True) == "".join(said)
        env = tok.decode([t for t, m in zip(ep.token_ids, ep.mask) if not m])
        assert env.endswith("<|im_start|>user\nCheck it again.<|im_end|>\n<|im_start|>assistant\n")
        assert all(lp == 0.0 for lp, m in zip(ep.logprobs, ep.mask) if not m)


# Last: it closes the module's shared engine.
def test_close_shuts_down_engine_processes_and_is_idempotent(vllm_backend):
    """Runs last: it closes the module's engine (the fixture's own close is then a no-op)."""
    import psutil

    engine_procs = [p for p in psutil.Process().children(recursive=True) if p.name().startswith("VLLM::")]
    assert engine_procs, "expected vLLM engine processes (VLLM::EngineCore, VLLM::Worker)"
    vllm_backend.close()
    vllm_backend.close()
    assert vllm_backend.llm is None
    _, alive = psutil.wait_procs(engine_procs, timeout=10)
    assert not alive, f"engine processes still running after close(): {alive}"
