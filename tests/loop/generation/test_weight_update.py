"""In-place weight updates of a loaded generation engine (transformers backend)."""

from __future__ import annotations

import pytest

from ratchet.loop.generation.sampling import SamplingParams, read_weights
from ratchet.loop.generation.transformers_backend import TransformersBackend
from ratchet.loop.tasks.sources import chat_messages

GREEDY = SamplingParams(n=1, temperature=0.0, max_new_tokens=10)
MSGS = [chat_messages("sys", [], f"What is {i} + {2 * i}?") for i in range(6)]


@pytest.fixture(scope="module")
def moved_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with every weight moved (a stand-in for a trained policy), saved as a checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * (p.abs().mean() + 0.1))
    out = tmp_path_factory.mktemp("moved")
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


def _texts(backend) -> list[str]:
    return [c.text for c in backend.generate(MSGS, GREEDY)]


@pytest.mark.parametrize("as_state_dict", [False, True])
def test_update_in_place_equals_a_fresh_engine_on_the_saved_weights(tiny_model_dir, moved_dir, as_state_dict):
    engine = TransformersBackend(tiny_model_dir, batch_size=4)
    model_before = engine.model
    before = _texts(engine)
    engine.update_weights(read_weights(moved_dir) if as_state_dict else moved_dir)
    fresh = _texts(TransformersBackend(moved_dir, batch_size=4))
    assert engine.model is model_before  # same object: no reload
    assert _texts(engine) == fresh
    assert fresh != before  # the update changed what the engine generates


def test_update_rejects_weights_of_another_model(tiny_model_dir, moved_dir):
    engine = TransformersBackend(tiny_model_dir, batch_size=4)
    state = read_weights(moved_dir)
    with pytest.raises(ValueError, match="unknown: \\['extra.weight'\\]"):
        engine.update_weights({**state, "extra.weight": state["model.norm.weight"]})
    del state["model.norm.weight"]
    with pytest.raises(ValueError, match="missing: \\['model.norm.weight'\\]"):
        engine.update_weights(state)
    with pytest.raises(FileNotFoundError, match="no .safetensors"):
        engine.update_weights(moved_dir / "nothing-here")


def test_unsaved_checkpoint_id_is_derived_from_parent_and_training_run():
    from ratchet.loop.checkpoints import unsaved_checkpoint_id

    a = unsaved_checkpoint_id("p1", "run1")
    assert a == unsaved_checkpoint_id("p1", "run1") and len(a) == 16 and int(a, 16) >= 0
    assert len({a, unsaved_checkpoint_id("p2", "run1"), unsaved_checkpoint_id("p1", "run2")}) == 3
    with pytest.raises(ValueError, match="parent id"):
        unsaved_checkpoint_id("", "run1")


def test_tied_weights_cross_to_vllm_workers_as_one_file(tmp_path, tiny_model_dir):
    """The learner's state dict of a tied-embedding model (SmolLM2: lm_head.weight is embed_tokens.weight) is what a
    vLLM engine's in-place update writes for its workers; safetensors refuses two names on one storage."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    from ratchet.loop.generation.vllm_backend import unshared_state

    state = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    assert state["lm_head.weight"].data_ptr() == state["model.embed_tokens.weight"].data_ptr()  # tied
    with pytest.raises(RuntimeError, match="share memory"):
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "raw.safetensors"))
    save_file(unshared_state(state), str(tmp_path / "w.safetensors"))
    back = load_file(str(tmp_path / "w.safetensors"))
    assert back.keys() == state.keys() and all(torch.equal(back[k], v) for k, v in state.items())
