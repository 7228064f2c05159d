"""The persistent rollout worker: one engine for a round, generate and in-place weight updates over files."""

from __future__ import annotations

import logging

import pytest

from ratchet.common.procs import alive
from ratchet.flows.compute.pool import StageTimeout, WorkerFailed
from ratchet.flows.compute.rollout import RolloutWorker
from ratchet.loop.config import ComputeConfig, GenerationConfig
from ratchet.loop.generation.base import SamplingParams
from ratchet.loop.generation.transformers_backend import TransformersBackend
from ratchet.loop.tasks.sources import chat_messages

MSGS = [chat_messages("sys", [], f"What is {i} + {2 * i}?") for i in range(5)]
GREEDY = SamplingParams(n=1, temperature=0.0, max_new_tokens=8)
LOG = logging.getLogger("test-rollout")


def _moved(tiny_model_dir, out):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(2)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * (p.abs().mean() + 0.1))
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


def test_worker_serves_generate_and_updates_until_closed(tiny_model_dir, tmp_path):
    moved = _moved(tiny_model_dir, tmp_path / "moved")
    gen, compute = GenerationConfig(batch_size=4), ComputeConfig(device_slots=False, generate_timeout_s=300)
    want_before = [c.text for c in TransformersBackend(tiny_model_dir, batch_size=4).generate(MSGS, GREEDY)]
    want_after = [c.text for c in TransformersBackend(moved, batch_size=4).generate(MSGS, GREEDY)]
    with RolloutWorker(tiny_model_dir, tmp_path / "w", gen=gen, compute=compute, dtype="float32", log=LOG) as w:
        pid = w.proc.pid
        assert [c.text for c in w.generate(MSGS, GREEDY)] == want_before
        with pytest.raises(WorkerFailed, match="no .safetensors"):
            w.update_weights(tmp_path / "missing")  # answered with its error; the worker stays up
        w.update_weights(moved)
        got = w.generate(MSGS, GREEDY, jobs=range(0, 4))
        assert [c.text for c in got] == want_after[:4] and [c.prompt_index for c in got] == [0, 1, 2, 3]
        assert w.proc.pid == pid  # one process (one engine load) for all of it
    assert not alive(pid)


def test_worker_past_its_timeout_is_killed(tiny_model_dir, tmp_path):
    compute = ComputeConfig(device_slots=False, generate_timeout_s=0.3)
    w = RolloutWorker(tiny_model_dir, tmp_path / "w", gen=GenerationConfig(), compute=compute, dtype="float32", log=LOG)
    with pytest.raises(StageTimeout, match="compute.generate_timeout_s = 0.3 s"):
        w.__enter__()
    assert w.proc.poll() is not None or not alive(w.proc.pid)


def test_train_launcher_ddp_fsdp_or_one_process():
    from ratchet.flows.compute.pool import train_argv

    args = ["-m", "ratchet.flows.compute.worker", "train"]
    one = train_argv(ComputeConfig(devices=("cuda:0",)), args)
    assert one[1:] == args
    ddp = train_argv(ComputeConfig(devices=("cuda:0", "cuda:1")), args)
    assert "--multi_gpu" in ddp and ddp[ddp.index("--num_processes") + 1] == "2" and ddp[-3:] == args
    fsdp = train_argv(ComputeConfig(devices=("cuda:0", "cuda:1"), fsdp=True), args)
    assert "--use_fsdp" in fsdp and "--multi_gpu" not in fsdp and "FULL_SHARD" in fsdp
    with pytest.raises(ValueError, match="compute.fsdp = true needs >= 2 GPUs"):
        ComputeConfig(devices=("cpu",), fsdp=True)


def test_colocated_learner_trains_updates_the_engine_and_saves_once(tiny_model_dir, tmp_path):
    from ratchet.loop.config import GRPOConfig
    from ratchet.loop.train.examples import ChatExample
    from ratchet.loop.train.grpo import GRPORun, GRPOSample

    samples = [
        GRPOSample(i, ChatExample(MSGS[i], text), reward, False)
        for i in range(3)
        for text, reward in (("Answer: 7", 0.0), (f"{i} + {2 * i} = {3 * i}\nAnswer: {3 * i}", 1.0))
    ]
    grpo = GRPOConfig(lr=3e-3, mini_batch_size=6, micro_batch_size=3)
    run = GRPORun(temperature=1.0, max_completion_length=16, seed=0)
    compute = ComputeConfig(device_slots=False, generate_timeout_s=300)
    with RolloutWorker(
        tiny_model_dir, tmp_path / "w", gen=GenerationConfig(batch_size=4), compute=compute, dtype="float32", log=LOG
    ) as w:
        with pytest.raises(WorkerFailed, match="before 'learner_init'"):
            w.train_pass(samples, run)
        assert w.init_learner(tiny_model_dir, grpo, "float32")  # the engine generates from the learner's module
        for _ in range(2):  # two on-policy passes, no checkpoint between them
            res = w.train_pass(samples, run)
            assert res["steps"] == 1 and len(res["kept"]) == 6
        live = [c.text for c in w.generate(MSGS, GREEDY)]
        w.save(tmp_path / "candidate")
    assert [c.text for c in TransformersBackend(tmp_path / "candidate", batch_size=4).generate(MSGS, GREEDY)] == live
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["candidate", "w"]  # one checkpoint written


def test_shared_module_generates_the_learners_current_policy(tiny_model_dir, tmp_path):
    """``share_module``: the engine generates from the learner's module (mode restored), refuses a mismatched one,
    and refuses ``update_weights`` once shared (those weights are the learner's)."""
    import torch
    from transformers import AutoModelForCausalLM

    engine = TransformersBackend(tiny_model_dir, batch_size=4)
    assert not engine.share_module(AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float64))
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir).train()
    assert engine.share_module(policy) and engine.model is policy
    with torch.no_grad():
        for p in policy.parameters():  # an optimizer step, in place
            p.add_(torch.randn_like(p) * (p.abs().mean() + 0.1))
    got = [c.text for c in engine.generate(MSGS, GREEDY)]
    assert policy.training  # its mode is the learner's again
    policy.save_pretrained(tmp_path / "saved")
    engine.tokenizer.save_pretrained(tmp_path / "saved")
    assert got == [c.text for c in TransformersBackend(tmp_path / "saved", batch_size=4).generate(MSGS, GREEDY)]
    with pytest.raises(ValueError, match="co-located learner"):
        engine.update_weights(tmp_path / "saved")


def test_adamw_fused_kernel_computes_the_foreach_update():
    import torch

    from ratchet.loop.train.grpo import adamw

    torch.manual_seed(0)
    start = [torch.randn(64, 33), torch.randn(7)]
    results = []
    for make in (
        lambda q: adamw(q, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.0),
        lambda q: torch.optim.AdamW(q, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.0, foreach=True),
    ):
        q = [torch.nn.Parameter(t.clone()) for t in start]
        opt, g = make(q), torch.Generator().manual_seed(1)
        for _ in range(5):
            for p in q:
                p.grad = torch.randn(p.shape, generator=g)
            opt.step()
        results.append([p.detach() for p in q])
    assert adamw([torch.nn.Parameter(torch.zeros(2))], lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0).defaults["fused"]
    assert not torch.equal(results[0][0], start[0])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
