"""Sizing a vLLM engine that shares its GPU with the learner (pure functions; sleep mode itself needs CUDA)."""

import logging

import pytest

from ratchet.loop.generation.colocate import HEADROOM, engine_memory_share, learner_bytes

GiB = 2**30


def test_learner_holds_five_copies_of_the_weights_or_two_with_lora():
    assert learner_bytes(1_000, "float32", lora=False) == 5 * 4_000  # policy, gradients, 2 AdamW moments, reference
    assert learner_bytes(1_000, "bfloat16", lora=False) == 5 * 2_000
    assert learner_bytes(1_000, "float32", lora=True) == 2 * 4_000  # frozen policy and reference


def test_engine_gets_what_the_learner_leaves():
    # Qwen2-1.5B in bf16 on an H200 (141 GB): the learner holds 15.4 GB, so vLLM keeps its default 0.9 ...
    n = 1_543_714_304
    assert engine_memory_share(0.9, learner_bytes(n, "bfloat16", lora=False), 141 * 10**9) == 0.84
    # ... a 7B in fp32 on 80 GB leaves vLLM nothing: refused in one line that names the ways out
    with pytest.raises(ValueError, match=r"needs 130\.4 GiB of the GPU's 80\.0 GiB.*lora_r.*smaller model"):
        engine_memory_share(0.9, learner_bytes(7 * 10**9, "float32", lora=False), 80 * GiB)
    # the share never exceeds what was configured, and it is rounded down to 0.01
    assert engine_memory_share(0.3, GiB, 80 * GiB) == 0.3
    assert engine_memory_share(0.99, 20 * GiB, 80 * GiB) == round(1 - 0.25 - HEADROOM, 2)


def test_engine_kwargs_are_unchanged_on_cpu_and_for_transformers():
    from dataclasses import replace

    from ratchet.flows.compute.messages import EngineSpec
    from ratchet.flows.compute.worker import colocated_engine_kwargs

    spec = EngineSpec("m", "vllm", {"gpu_memory_utilization": 0.9}, 10 * GiB)
    log = logging.getLogger("test")
    assert colocated_engine_kwargs(spec, "cpu", log) == {"gpu_memory_utilization": 0.9}  # sleep mode is CUDA-only
    assert colocated_engine_kwargs(replace(spec, backend="transformers"), "cuda", log) == {"gpu_memory_utilization": 0.9}
    assert colocated_engine_kwargs(replace(spec, learner_bytes=None), "cuda", log) == {"gpu_memory_utilization": 0.9}
