"""Packed training rows (loop.train.packing): the layout by hand, and the loss and gradients equal to the padded path's."""

from __future__ import annotations

import pytest
import torch

from ratchet.loop.train.packing import common_prefix, prepared_mask, tree_batch
from ratchet.loop.train.sft import batch_nll


def test_tree_batch_layout_by_hand():
    # prefix [1, 2]; prompts [1, 2, 3] and [1, 2]; completions [7, 8] (prompt 0), [9] (prompt 1), [5, 6] (prompt 0)
    tb = tree_batch([1, 2], [[3], []], [0, 1, 0], [[7, 8], [9], [5, 6]], pad_id=0)
    assert tb.input_ids.tolist() == [[1, 2, 3, 7, 8, 9, 5, 6]]
    assert tb.position_ids.tolist() == [[0, 1, 2, 3, 4, 2, 3, 4]]  # each completion continues from its prompt
    m = tb.attention_mask[0, 0].int().tolist()
    assert m[3] == [1, 1, 1, 1, 0, 0, 0, 0]  # 7 sees the prefix, its suffix [3] and itself
    assert m[5] == [1, 1, 0, 0, 0, 1, 0, 0]  # 9's prompt is the prefix alone: not [3], not another completion
    assert m[7] == [1, 1, 1, 0, 0, 0, 1, 1]  # 6 sees its prompt and its own completion only
    assert tb.predict_at.tolist() == [[2, 3], [1, 0], [2, 6]]  # 9 is predicted from the prefix's last token
    assert tb.valid.tolist() == [[True, True], [True, False], [True, True]]
    assert tb.completion_ids.tolist() == [[7, 8], [9, 0], [5, 6]]


def test_tree_batch_refuses_bad_rows():
    with pytest.raises(ValueError, match="indexes outside"):
        tree_batch([1], [[2]], [1], [[3]], pad_id=0)
    with pytest.raises(ValueError, match="shorter than the longest"):
        tree_batch([1], [[2]], [0], [[3, 4]], pad_id=0, width=1)
    assert common_prefix([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2 and common_prefix([]) == 0


def _parts(tok):
    """Tokenized examples as a round's RFT batch has them: shared system prompt, two completions of one prompt, an
    episode whose middle tokens are the environment's (loss mask 0), and one whose prompt was cut away entirely."""
    base = tok("<|im_start|>system\nSolve it.<|im_end|>\n", add_special_tokens=False)["input_ids"]
    q = [
        tok(f"<|im_start|>user\nWhat is {a} + {b}?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
        for a, b in [(2, 3), (10, 7), (4, 4)]
    ]
    c = [
        tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        for t in ["2 + 3 = 5\nAnswer: 5", "Answer: 5", "10 + 7 = 17. Answer: 17", "4 + 4 = 8"]
    ]
    episode = c[2] + c[1]
    return [
        (base + q[0], c[0], [1] * len(c[0])),
        (base + q[0], c[1], [1] * len(c[1])),
        (base + q[1], episode, [1] * len(c[2]) + [0] * 3 + [1] * (len(c[1]) - 3)),
        (base + q[2], c[3], [1] * len(c[3])),
        ([], c[0], [1] * len(c[0])),
    ]


@pytest.mark.parametrize(
    ("attn", "dtype", "rtol", "grad_atol"),
    [("sdpa", torch.float64, 1e-7, 1e-6), ("eager", torch.float64, 1e-7, 1e-6), ("sdpa", torch.float32, 1e-5, 1e-5)],
)
def test_packed_loss_and_gradients_equal_the_padded_path(tiny_model_dir, attn, dtype, rtol, grad_atol):
    """The same computation in two layouts: in float64 the losses agree to ~2e-9 relative and the gradients to ~5e-8
    (Llama's RMSNorm computes in float32 even in a float64 model); in float32 they differ by the rounding of other
    matrix shapes and of log_softmax against cross_entropy (~2e-6 relative here)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=dtype, attn_implementation=attn)
    parts = _parts(tok)
    grads = {}
    for packing in (False, True):
        model.zero_grad()
        loss, tokens = batch_nll(model, parts, tok.pad_token_id, packing)
        loss.backward()
        grads[packing] = (loss.item(), tokens, [p.grad.clone() for p in model.parameters()])
    (lp, tp, gp), (lk, tk, gk) = grads[False], grads[True]
    assert tp == tk == sum(len(p) + len(c) for p, c, _ in parts)
    assert abs(lk - lp) <= rtol * abs(lp), (lp, lk)
    for a, b in zip(gp, gk):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=grad_atol)
    # the zero-weight pass of a rank without a share: no loss, no gradient
    model.zero_grad()
    zero, _ = batch_nll(model, parts, tok.pad_token_id, True, zero=True)
    assert zero.item() == 0.0


def test_flash_attention_is_refused_in_one_line(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="packing = false"):
        prepared_mask(model, torch.ones((1, 1, 2, 2), dtype=torch.bool))
