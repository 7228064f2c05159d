"""The gather-for-engine of an FSDP learner (``full_state_dict``), on one CPU rank (gloo).

accelerate builds FSDP on GPUs only (on CPU ``Accelerator`` falls back to DDP), so a whole FSDP round cannot run
here; torch's FSDP2 (``fully_shard``) does run on CPU (FSDP1, accelerate's default, needs an accelerator device), and this is the function the persistent round calls on every rank after
each pass to give its engine the full weights (``GRPOLearner.state_dict`` with ``compute.fsdp``).
"""

import copy
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM

from ratchet.loop.config import ComputeConfig
from ratchet.loop.train.data_parallel import FSDP_SETTINGS, fsdp_env, full_state_dict


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=64, tie_word_embeddings=False)  # fmt: skip
    return LlamaForCausalLM(cfg)


class Learner(torch.nn.Module):
    """What the learner shards: a wrapper whose ``policy`` is the Hugging Face model (``rollout_module``'s layout)."""

    def __init__(self, policy):
        super().__init__()
        self.policy = policy

    def forward(self, **kw):
        return self.policy(**kw)


def _ids():
    return torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(1))


def _train(m) -> None:
    """Two AdamW steps on the same batch (on every rank: FSDP averages the ranks' gradients, so sharded = plain)."""
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    for _ in range(2):
        m(input_ids=_ids(), labels=_ids()).loss.backward()
        opt.step()
        opt.zero_grad()


def _sharded_learner(plain):
    from torch.distributed.fsdp import fully_shard

    sharded = Learner(copy.deepcopy(plain))
    for layer in sharded.policy.model.layers:  # one unit per decoder layer, then the root (FSDP_SETTINGS' layout)
        fully_shard(layer)
    fully_shard(sharded)
    return sharded


def _rank(rank: int, world: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    sharded = _sharded_learner(_llama())
    _train(sharded)
    local = sharded.policy.model.embed_tokens.weight.to_local().shape[0]
    torch.save({"local_rows": local, "full": full_state_dict(sharded, prefix="policy.")}, f"{out}.{rank}")
    dist.barrier()  # both ranks have written their file
    # No teardown: gloo's destroy_process_group can abort a rank whose peer already exited ("terminate called without
    # an active exception", SIGABRT, seen once in CI after the file was written). The round's engine ranks do not tear
    # their group down either; the parent stops and kills them.
    os._exit(0)


def test_every_rank_of_two_gets_the_whole_trained_weights(tmp_path):
    # Two processes running this file as a script: pytest imports test modules with --import-mode=importlib and
    # the repository root is not on sys.path, so a spawned child could not import ``_rank`` by its module name.
    args = ["2", str(tmp_path / "store"), str(tmp_path / "full")]
    ranks = [subprocess.Popen([sys.executable, __file__, str(r), *args], stderr=subprocess.PIPE, text=True) for r in range(2)]
    try:
        for r, p in enumerate(ranks):
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, f"rank {r}: {err[-3000:]}"
    finally:
        for p in ranks:  # a rank that failed leaves the other waiting in a collective
            p.kill()
    plain = _llama()
    _train(plain)
    for r in range(2):
        got = torch.load(tmp_path / f"full.{r}", weights_only=True)
        assert got["local_rows"] == 48  # each rank held half of the (96, 32) embedding, and got all of it back
        assert got["full"].keys() == plain.state_dict().keys()
        for k, v in plain.state_dict().items():
            torch.testing.assert_close(got["full"][k], v, rtol=0, atol=1e-6)


def test_full_state_dict_gives_each_rank_the_unsharded_trained_weights(one_rank):
    ids = _ids()
    plain = _llama()
    sharded = _sharded_learner(plain)
    for m in (plain, sharded):  # the same two AdamW steps on the plain model and through the sharded learner
        _train(m)
    assert type(next(sharded.parameters())).__name__ == "DTensor"  # really sharded
    full = full_state_dict(sharded, prefix="policy.")
    want = plain.state_dict()
    assert full.keys() == want.keys()
    for k, v in want.items():
        assert full[k].shape == v.shape and full[k].dtype == v.dtype and type(full[k]) is torch.Tensor, k
        torch.testing.assert_close(full[k], v, rtol=0, atol=1e-6)
    engine = _llama()  # a rank's engine: another model, loaded from the gathered weights
    engine.load_state_dict(full, strict=True)
    prompt = ids[:1, :4]
    assert torch.equal(
        engine.generate(prompt, max_new_tokens=8, do_sample=False), plain.generate(prompt, max_new_tokens=8, do_sample=False)
    )


def test_one_table_of_fsdp_settings_for_the_rank_env(tiny_model_dir):
    """An FSDP rank's environment carries every FSDP setting; a DDP rank's none; no rank gets a TCP rendezvous."""
    from ratchet.flows.compute.engine import LocalEngine, Placement
    from ratchet.flows.compute.messages import engine_spec
    from ratchet.loop.config import GenerationConfig

    def env(fsdp: bool) -> dict[str, str]:
        gen, compute = GenerationConfig(), ComputeConfig(devices=("cuda:0", "cuda:1"), fsdp=fsdp, device_slots=False)
        e = LocalEngine(engine_spec(tiny_model_dir, gen, "float32"), Placement((("cuda:0",), ("cuda:1",)), fsdp), gen=gen,
                        compute=compute, log=None)  # fmt: skip
        e._rendezvous = "/tmp/x/store"
        return e._rank_env(1, ("cuda:1",))

    fsdp = env(True)
    assert fsdp["ACCELERATE_USE_FSDP"] == "true" and fsdp == {**fsdp, **fsdp_env()}
    for k, v in FSDP_SETTINGS.items():
        assert fsdp[f"FSDP_{k.upper()}"] == v
    ddp = env(False)
    assert "ACCELERATE_USE_FSDP" not in ddp and ddp["RANK"] == "1" and ddp["CUDA_VISIBLE_DEVICES"] == "1"
    assert ddp["RATCHET_RENDEZVOUS"] == "/tmp/x/store" and "MASTER_PORT" not in ddp and "MASTER_ADDR" not in ddp


if __name__ == "__main__":  # one rank of the two-rank test: RANK WORLD STORE OUT
    _rank(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
