"""The round engine: ranks as child processes spoken to in typed messages, timeouts, dead ranks, learners, sharding."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ratchet.common.procs import alive
from ratchet.flows.compute.engine import LocalEngine, Placement
from ratchet.flows.compute.messages import GRPOStep, StartLearner, engine_spec
from ratchet.flows.compute.pool import route_line, worker_groups
from ratchet.flows.compute.protocol import PROGRESS_PREFIX, StageTimeout, WorkerFailed
from ratchet.flows.compute.slots import slot_names
from ratchet.loop.config import ComputeConfig, ConfigError, GenerationConfig, load_config
from ratchet.loop.generation.sampling import SamplingParams, shard_jobs
from ratchet.loop.generation.transformers_backend import TransformersBackend
from ratchet.loop.tasks.sources import chat_messages

PY = sys.executable
MSGS = [chat_messages("sys", [], f"What is {i} + {2 * i}?") for i in range(5)]
GREEDY = SamplingParams(n=1, temperature=0.0, max_new_tokens=8)
LOG = logging.getLogger("test-engine")


def _engine(model, *groups, batch_size=4, **compute) -> LocalEngine:
    gen = GenerationConfig(batch_size=batch_size)
    c = ComputeConfig(devices=tuple(d for g in groups for d in g) or ("cpu",), device_slots=False, **compute)
    return LocalEngine(engine_spec(model, gen, "float32"), Placement(tuple(groups) or (("cpu",),)), gen=gen, compute=c, log=LOG)


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


@pytest.mark.parametrize("n_prompts,n,shards,align", [(12, 2, 2, 6), (7, 3, 2, 4), (5, 4, 3, 4), (1, 1, 4, 32), (10, 3, 4, 3)])
def test_shard_jobs_cover_every_job_once_on_aligned_bounds(n_prompts, n, shards, align):
    got = shard_jobs(n_prompts, n, shards, align)
    total = n_prompts * n
    assert [j for r in got for j in r] == list(range(total))
    assert 1 <= len(got) <= shards and all(len(r) for r in got)
    assert all(r.start % align == 0 and (r.stop % align == 0 or r.stop == total) for r in got)
    units = [-(-len(r) // align) for r in got]
    assert max(units) - min(units) <= 1  # balanced


def test_transformers_shards_merge_into_the_whole_call(tiny_model_dir):
    """Sampling is seeded per batch position, so running the batches in two pieces changes nothing."""
    b = TransformersBackend(tiny_model_dir, batch_size=4)
    msgs = [chat_messages("sys", [], f"What is {i} + {i + 2}?" + " Think." * (i % 3)) for i in range(7)]  # jobs run by length
    params = SamplingParams(n=3, temperature=1.2, max_new_tokens=6, seed=5)
    whole = b.generate(msgs, params)
    parts = [c for r in shard_jobs(7, 3, 2, 4) for c in b.generate(msgs, params, jobs=r)]
    assert sorted(parts, key=lambda c: (c.prompt_index, c.sample_index)) == whole  # the engine's merge
    with pytest.raises(ValueError, match="multiples of 4"):
        b.generate(msgs, params, jobs=range(2, 8))


def test_worker_groups_and_slot_names():
    assert worker_groups(("cuda:0", "cuda:1", "cuda:2", "cuda:3"), 2) == [("cuda:0", "cuda:1"), ("cuda:2", "cuda:3")]
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        worker_groups(("cuda:0", "cuda:1", "cuda:2"), 2)
    assert slot_names(("cpu", "cpu")) == ["ratchet-device-cpu-0", "ratchet-device-cpu-1"]
    assert slot_names(("cuda:3",)) == ["ratchet-device-cuda-3"]


def test_compute_config_rules_and_not_a_campaign_setting():
    cfg = load_config(None, **{"compute.devices": "cuda:1"})
    assert cfg.compute.devices == ("cuda:1",) and cfg.compute.on_gpu
    assert "compute" not in cfg.campaign_settings()
    assert "tensor_parallel_size" not in cfg.campaign_settings()["generation"]
    for bad, rule in [
        ("gpu0", "'cpu' or 'cuda:<index>'"),
        (["cpu", "cuda:0"], "mixes cpu and cuda"),
        (["cuda:0", "cuda:0"], "lists a GPU twice"),
    ]:
        with pytest.raises(ConfigError, match=rule):
            load_config(None, **{"compute.devices": bad})
    with pytest.raises(ConfigError, match="tensor_parallel_size"):
        load_config(None, **{"compute.devices": ["cuda:0", "cuda:1", "cuda:2"], "generation.tensor_parallel_size": 2})


def test_engine_serves_generate_and_sync_in_one_process_until_closed(tiny_model_dir, tmp_path):
    moved = _moved(tiny_model_dir, tmp_path / "moved")
    want_before = [c.text for c in TransformersBackend(tiny_model_dir, batch_size=4).generate(MSGS, GREEDY)]
    want_after = [c.text for c in TransformersBackend(moved, batch_size=4).generate(MSGS, GREEDY)]
    with _engine(tiny_model_dir, generate_timeout_s=300) as e:
        e.start()
        pid = e._procs[0].proc.pid
        assert [c.text for c in e.generate(MSGS, GREEDY)] == want_before
        with pytest.raises(WorkerFailed, match="no .safetensors"):
            e.sync(tmp_path / "missing")  # answered with its error; the rank stays up
        e.sync(moved, "moved")
        assert e.holds == "moved" and [c.text for c in e.generate(MSGS, GREEDY)] == want_after
        assert e._procs[0].proc.pid == pid  # one process (one engine load) for all of it
    assert not alive(pid)
    assert [p.name for p in tmp_path.iterdir()] == ["moved"]  # nothing exchanged on disk


def test_engine_loading_past_its_timeout_is_killed(tiny_model_dir):
    e = _engine(tiny_model_dir, generate_timeout_s=0.3)
    t0 = time.monotonic()
    with pytest.raises(StageTimeout, match="loading the model ran past compute.generate_timeout_s = 0.3 s"):
        e.start()
    assert time.monotonic() - t0 < 10 and all(p.proc is None for p in e._procs)


def test_a_dead_rank_is_reported_within_a_second_with_its_last_output(tiny_model_dir):
    with _engine(tiny_model_dir, generate_timeout_s=300) as e:
        e.start()
        proc = e._procs[0].proc
        os.killpg(proc.pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(WorkerFailed, match=r"(?s)engine rank 0 \[cpu\] exited with status -9 while generating.*loaded"):
            e.generate(MSGS, GREEDY)
        assert time.monotonic() - t0 < 1.5


def test_two_cpu_ranks_generate_the_same_rollouts_as_one(tiny_model_dir):
    """Two ranks each sample half of the jobs (batch-aligned shards); merged, they equal one engine's whole call."""
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=8, seed=5)
    msgs = [chat_messages("sys", [], f"What is {i} + {i + 1}?") for i in range(6)]
    one = TransformersBackend(tiny_model_dir, batch_size=4).generate(msgs, params)
    with _engine(tiny_model_dir, ("cpu",), ("cpu",), generate_timeout_s=300, cpu_threads_per_worker=1) as e:
        e.start()
        assert e.ranks == 2 and e.generate(msgs, params) == one


def test_rank_output_reaches_the_logger_and_progress_is_summed(caplog):
    got, tail, done = [], [], {}
    log = logging.getLogger("test-engine-lines")
    with caplog.at_level(logging.INFO, logger="test-engine-lines"):
        for k in range(2):
            route_line(f"w{k}", f"WARNING some.lib: careful {k}", log, tail, done, k, None)
            progress = PROGRESS_PREFIX + json.dumps({"bar": "rollouts", "done": 3, "total": 4})
            route_line(f"w{k}", progress, log, tail, done, k, lambda bar, d, t: got.append((bar, d, t)))
    msgs = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert (logging.WARNING, "[w1] WARNING some.lib: careful 1") in msgs and got[-1] == ("rollouts", 6, 8)
    assert not any(PROGRESS_PREFIX.strip() in m for _, m in msgs)


def test_ranks_die_when_the_round_process_is_killed(tiny_model_dir):
    """kill -9 of the round's process (not of the ranks' groups) still ends every rank and its children."""
    parent = textwrap.dedent(f"""
        import logging, sys
        from ratchet.flows.compute.engine import LocalEngine, Placement
        from ratchet.flows.compute.messages import engine_spec
        from ratchet.loop.config import ComputeConfig, GenerationConfig
        gen, c = GenerationConfig(), ComputeConfig(devices=("cpu", "cpu"), device_slots=False, cpu_threads_per_worker=1)
        e = LocalEngine(engine_spec({str(tiny_model_dir)!r}, gen, "float32"), Placement((("cpu",), ("cpu",))),
                        gen=gen, compute=c, log=logging.getLogger("p"))
        e.start()
        print("pids", *[p.proc.pid for p in e._procs], flush=True)
        import time; time.sleep(120)
    """)
    p = subprocess.Popen([PY, "-c", parent], stdout=subprocess.PIPE, text=True)
    line, deadline = "", time.monotonic() + 120
    while not line.startswith("pids") and time.monotonic() < deadline:
        line = p.stdout.readline()
    pids = [int(x) for x in line.split()[1:]]
    assert len(pids) == 2 and all(alive(x) for x in pids)
    p.kill()
    p.wait()
    deadline = time.monotonic() + 5
    while any(alive(x) for x in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(x) for x in pids), f"engine ranks {pids} outlived the killed round process"


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
    step = GRPOStep(samples, GRPORun(temperature=1.0, max_completion_length=16, seed=0))
    with _engine(tiny_model_dir, generate_timeout_s=300) as e:
        e.start()
        with pytest.raises(WorkerFailed, match="before StartLearner"):
            e.train_step(step)
    with _engine(tiny_model_dir, generate_timeout_s=300) as e:
        assert e.start(StartLearner(str(tiny_model_dir), grpo.model_dump(mode="json"), "float32"))  # shared module
        for _ in range(2):  # two on-policy passes, no checkpoint between them
            res = e.train_step(step)
            assert res["steps"] == 1 and len(res["kept"]) == 6
        live = [c.text for c in e.generate(MSGS, GREEDY)]
        e.save(tmp_path / "candidate")
    assert [c.text for c in TransformersBackend(tmp_path / "candidate", batch_size=4).generate(MSGS, GREEDY)] == live
    assert sorted(p.name for p in tmp_path.iterdir()) == ["candidate"]  # one checkpoint written, nothing else


def test_fsdp_needs_two_gpus():
    with pytest.raises(ValueError, match="compute.fsdp = true needs >= 2 GPUs"):
        ComputeConfig(devices=("cpu",), fsdp=True)


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


def test_result_file_protocol_of_the_progress_printer(capsys):
    from ratchet.flows.compute.worker import progress_printer

    report = progress_printer("train", every_s=3600)
    report(1, 5)
    report(2, 5)  # throttled
    report(5, 5)  # the last one always goes out
    lines = [json.loads(x[len(PROGRESS_PREFIX) :]) for x in capsys.readouterr().out.splitlines()]
    assert lines == [{"bar": "train", "done": 1, "total": 5}, {"bar": "train", "done": 5, "total": 5}]


def test_device_slots_are_held_per_device_while_a_stage_runs(prefect_harness):
    from prefect.client.orchestration import get_client

    from ratchet.flows.compute.slots import device_slots, reset_device_slots

    compute = load_config(None, **{"compute.devices": ["cpu", "cpu"]}).compute
    names = slot_names(compute.devices)

    def active():
        with get_client(sync_client=True) as client:
            return [client.read_global_concurrency_limit_by_name(n).active_slots for n in names]

    with device_slots(compute.devices, compute, logging.getLogger("test-slots")):
        assert active() == [1, 1]
        with pytest.raises(TimeoutError):  # a second stage on the same devices waits (here: gives up)
            with device_slots(compute.devices, compute.model_copy(update={"slot_wait_timeout_s": 1.0}), logging.getLogger("t")):
                pass
    assert active() == [0, 0]
    with device_slots(compute.devices, compute, logging.getLogger("test-slots")):
        assert reset_device_slots(compute.devices) == names and active() == [0, 0]
