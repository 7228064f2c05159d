import math

import pytest
import torch

from ratchet.loop.config import SFTConfig
from ratchet.loop.tasks.sources import chat_messages
from ratchet.loop.train.examples import ChatExample
from ratchet.loop.train.sft import IGNORE_INDEX, collate, completion_nll, tokenize_example, train_sft


def test_completion_nll_hand_computed():
    # B=1, T=3, V=2. Targets: position 1 is masked (prompt), position 2 is token 1.
    logits = torch.tensor([[[0.0, 0.0], [0.0, math.log(3.0)], [5.0, 5.0]]])
    labels = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, 1]])
    # Only the prediction at t=1 of label[2]=1 counts: p = 3/(1+3) -> nll = -log(0.75)
    assert completion_nll(logits, labels).item() == pytest.approx(-math.log(0.75), rel=1e-6)


def test_labels_mask_prompt_and_keep_whole_completion(smollm2_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    ex = ChatExample(chat_messages("Be brief.", [("1+1?", "Answer: 2")], "What is 2 + 3?"), "2 + 3 = 5\nAnswer: 5")
    ids, labels = tokenize_example(tok, ex, max_seq_len=512)
    n_completion = sum(l != IGNORE_INDEX for l in labels)
    assert tok.decode([i for i, l in zip(ids, labels) if l != IGNORE_INDEX]) == "2 + 3 = 5\nAnswer: 5" + tok.eos_token
    assert labels[: len(ids) - n_completion] == [IGNORE_INDEX] * (len(ids) - n_completion)
    # Rendering matches generation time: the prompt part equals the chat template with generation prompt.
    prompt = tok.apply_chat_template(ex.messages, tokenize=False, add_generation_prompt=True)
    assert tok.decode(ids[: len(ids) - n_completion]) == prompt
    ids_short, labels_short = tokenize_example(tok, ex, max_seq_len=16)
    assert len(ids_short) == 16 and sum(l != IGNORE_INDEX for l in labels_short) == n_completion


def test_collate_pads_right():
    ids, mask, labels = collate([([1], [2, 3], [1, 1]), ([], [4], [1])], pad_id=0)
    assert ids.tolist() == [[1, 2, 3], [4, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert labels.tolist() == [[-100, 2, 3], [4, -100, -100]]


@pytest.mark.parametrize("packing", [False, True])
def test_train_sft_lowers_loss_and_saves(tiny_model_dir, tmp_path, packing):
    exs = [ChatExample(chat_messages("sys", [], f"What is {i} * 2?"), f"Answer: {2 * i}") for i in range(8)]
    res = train_sft(
        tiny_model_dir,
        exs,
        tmp_path / "out",
        SFTConfig(
            lr=1e-2,
            epochs=6,
            batch_size=4,
            warmup_ratio=0.0,
            weight_decay=0.0,
            max_grad_norm=1.0,
            max_seq_len=128,
            seed=0,
            packing=packing,
        ),
    )
    assert res.metrics["train/loss_last"] < res.metrics["train/loss_first"]
    assert (tmp_path / "out" / "model.safetensors").is_file() and res.steps == 12


def test_completion_nll_with_a_global_denominator_is_a_share_of_the_sum():
    logits = torch.tensor([[[0.0, 0.0], [0.0, math.log(3.0)], [5.0, 5.0]]])
    labels = torch.tensor([[IGNORE_INDEX, 0, 1]])
    mean = completion_nll(logits, labels).item()
    assert completion_nll(logits, labels, num_tokens=4.0).item() == pytest.approx(mean * 2 / 4, rel=1e-6)


def test_sft_lora_trains_adapters_and_saves_a_plain_checkpoint(tiny_model_dir, tmp_path):
    pytest.importorskip("peft")
    from safetensors.torch import load_file

    exs = [ChatExample(chat_messages("sys", [], f"What is {i} * 3?"), f"Answer: {3 * i}") for i in range(4)]
    cfg = SFTConfig(lr=1e-2, epochs=2, batch_size=4, warmup_ratio=0.0, max_seq_len=128, lora_r=4, lora_alpha=8)
    res = train_sft(tiny_model_dir, exs, tmp_path / "out", cfg)
    saved, before = load_file(tmp_path / "out" / "model.safetensors"), load_file(tiny_model_dir / "model.safetensors")
    assert saved.keys() == before.keys()  # merged: no lora_A / lora_B tensors, the base model's names
    assert not torch.equal(saved["model.layers.0.self_attn.q_proj.weight"], before["model.layers.0.self_attn.q_proj.weight"])
    assert torch.equal(saved["model.norm.weight"], before["model.norm.weight"])  # not a LoRA target: frozen
    assert res.steps == 2


def test_merged_lora_state_is_what_merge_and_unload_saves_and_leaves_the_adapters(tiny_model_dir):
    """The weights pushed into an engine from a LoRA learner equal the merged model's (W + alpha/r B A), under the
    plain model's names, and the learner keeps training unmerged adapters."""
    from transformers import AutoModelForCausalLM

    from ratchet.loop.train.sft import merged_lora_state, with_lora

    model = with_lora(AutoModelForCausalLM.from_pretrained(tiny_model_dir), 4, 8, ("q_proj", "v_proj"))
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_()  # B starts at 0: give the adapters an effect
    before = {k: v.clone() for k, v in model.state_dict().items()}
    merged = merged_lora_state(model)
    assert {k: v.clone() for k, v in model.state_dict().items()}.keys() == before.keys()
    assert all(torch.equal(v, before[k]) or torch.allclose(v, before[k], atol=1e-6) for k, v in model.state_dict().items())
    reference = model.merge_and_unload().state_dict()
    assert merged.keys() == reference.keys()
    assert all(torch.allclose(merged[k], reference[k], atol=1e-6) for k in reference)
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    assert not torch.allclose(merged["model.layers.0.self_attn.q_proj.weight"], plain["model.layers.0.self_attn.q_proj.weight"])
    with pytest.raises(ValueError, match="needs a peft model"):
        merged_lora_state(AutoModelForCausalLM.from_pretrained(tiny_model_dir))
