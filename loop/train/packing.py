"""Packed training sequences: a micro-batch as ONE row with no padding, prompts shared, each example kept to itself.

A training micro-batch is a two-level tree of token segments: the ``prefix`` common to every prompt (system prompt
and few-shot turns), each distinct prompt's ``suffix`` after it, and each example's ``completion`` after its
prompt. ``tree_batch`` lays the segments out once each, in that order, as one row ``(1, L)``:

    [prefix][suffix_0][suffix_1]...[suffix_{R-1}][completion_0]...[completion_{B-1}]

with position ids that restart where each example's own sequence would have them (a completion continues from its
prompt's length) and a 4D attention mask in which a token sees the earlier tokens of its own segment and all of its
ancestors' (a completion: its prompt's suffix and the prefix; never another example). Every example therefore gets
exactly the hidden states it gets alone in a padded batch, with no pad token computed and each shared prompt token
computed once (its gradient is the sum over the examples that attend to it, as in the padded batch). This is
sequence packing with position ids reset per example (what TRL's ``padding_free`` and transformers'
``DataCollatorWithFlattening`` do) generalised to shared prompts, as a prefix-tree ("shared-prefix") mask.

The mask is dense, (1, 1, L, L): attention costs O(L^2) for the row against sum of T_b^2 for padded rows, which is
small beside the linear layers while L stays in the low thousands (a micro-batch of 8 demo examples: L ~ 600).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

# attention implementations that take a prepared 4D mask: bool (True = attend) or additive float (0 / -inf)
BOOL_MASK_ATTENTION = frozenset({"sdpa", "ratchet_sdpa_gqa"})
FLOAT_MASK_ATTENTION = frozenset({"eager"})


@dataclass(frozen=True)
class TreeBatch:
    """One packed row and where each completion token is predicted from.

    Attributes:
        input_ids: (1, L) int64, every segment once (see the module docstring).
        position_ids: (1, L) int64, each token's position in its own example's sequence.
        attention_mask: (1, 1, L, L) bool, True where a query token may attend to a key token.
        predict_at: (B, C) int64, the row position whose logits predict completion token (b, c) (0 where not valid).
        valid: (B, C) bool, True on the completion tokens that have a predictor (a completion with an empty prompt
            and no prefix has none for its first token, as in a padded row) and are within the completion.
        completion_ids: (B, C) int64, the completions right-padded with ``pad_id``; C = the longest (or ``width``).
    """

    input_ids: object
    position_ids: object
    attention_mask: object
    predict_at: object
    valid: object
    completion_ids: object


def common_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix shared by all ``prompts`` (0 for none or an empty list)."""
    return len(os.path.commonprefix([list(p) for p in prompts])) if prompts else 0


def tree_batch(
    prefix: Sequence[int],
    suffixes: Sequence[Sequence[int]],
    prompt_row: Sequence[int],
    completions: Sequence[Sequence[int]],
    pad_id: int,
    width: int | None = None,
) -> TreeBatch:
    """Lay out ``B = len(completions)`` examples as one packed row (module docstring).

    Args:
        prefix: token ids every example's prompt starts with.
        suffixes: (R,) each distinct prompt's ids after ``prefix`` (may be empty).
        prompt_row: (B,) index into ``suffixes`` of each completion's prompt.
        completions: (B,) completion token ids.
        pad_id: fills ``completion_ids`` past each completion's end.
        width: C, at least the longest completion (default: the longest).

    Returns:
        A ``TreeBatch`` (CPU tensors).

    Raises:
        ValueError: ``prompt_row`` and ``completions`` differ in length, a row index is out of range, or ``width`` is
            shorter than a completion.
    """
    import torch

    if len(prompt_row) != len(completions):
        raise ValueError(f"prompt_row has {len(prompt_row)} entries for {len(completions)} completions")
    if any(not 0 <= r < len(suffixes) for r in prompt_row):
        raise ValueError(f"prompt_row {list(prompt_row)} indexes outside the {len(suffixes)} suffixes")
    longest = max((len(c) for c in completions), default=0)
    C = max(longest, 1) if width is None else width
    if C < longest:
        raise ValueError(f"width {width} is shorter than the longest completion ({longest} tokens)")
    plen = len(prefix)
    ids: list[int] = list(prefix)
    pos: list[int] = list(range(plen))
    node: list[int] = [0] * plen  # segment of each token: 0 prefix, 1 + r suffix r, 1 + R + b completion b
    parent = [-1] + [0] * len(suffixes) + [1 + r for r in prompt_row]  # each segment's parent segment
    suffix_end = []  # row position of each suffix's last token (its prompt's last token)
    for r, s in enumerate(suffixes):
        ids += s
        pos += range(plen, plen + len(s))
        node += [1 + r] * len(s)
        suffix_end.append(len(ids) - 1 if s else plen - 1)  # an empty suffix: the prompt ends with the prefix
    predict_at = torch.zeros((len(completions), C), dtype=torch.long)
    valid = torch.zeros((len(completions), C), dtype=torch.bool)
    comp = torch.full((len(completions), C), pad_id, dtype=torch.long)
    for b, (r, c) in enumerate(zip(prompt_row, completions)):
        start, p0 = len(ids), plen + len(suffixes[r])
        ids += c
        pos += range(p0, p0 + len(c))
        node += [1 + len(suffixes) + b] * len(c)
        if c:
            comp[b, : len(c)] = torch.tensor(c, dtype=torch.long)
            at = [suffix_end[r]] + list(range(start, start + len(c) - 1))  # token t is predicted at t - 1
            predict_at[b, : len(c)] = torch.tensor(at, dtype=torch.long).clamp(min=0)
            valid[b, : len(c)] = torch.tensor(at) >= 0
    n_nodes = len(parent)
    ancestor = torch.eye(n_nodes, dtype=torch.bool)  # ancestor[n, m]: m is n or one of n's ancestors
    for n in range(1, n_nodes):  # parents come before children, so a parent's row is complete
        ancestor[n] |= ancestor[parent[n]]
    seg = torch.tensor(node, dtype=torch.long)  # (L,)
    L = len(ids)
    mask = ancestor[seg[:, None], seg[None, :]] & torch.ones((L, L), dtype=torch.bool).tril()  # (L, L)
    return TreeBatch(
        torch.tensor([ids], dtype=torch.long),
        torch.tensor([pos], dtype=torch.long),
        mask[None, None],
        predict_at,
        valid,
        comp,
    )


def prepared_mask(model, mask):
    """``mask`` (1, 1, L, L) bool in the form ``model``'s attention implementation takes (bool for SDPA, additive
    float in the model's dtype for eager).

    Raises:
        ValueError: the implementation takes no prepared 4D mask (flash attention): set the ``packing`` option off.
    """
    import torch

    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    if impl in BOOL_MASK_ATTENTION:
        return mask
    if impl in FLOAT_MASK_ATTENTION:
        dtype = next(model.parameters()).dtype
        return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)
    raise ValueError(
        f"packed sequences need an attention implementation that takes a 4D mask ({', '.join(sorted(BOOL_MASK_ATTENTION | FLOAT_MASK_ATTENTION))}); "
        f"the model uses {impl!r}: set sft.packing = false"
    )


def tree_logits(model, tb: TreeBatch):
    """The logits predicting each completion token: (B, C, V) in the model's dtype (pad positions hold a copy of a
    real position's logits; mask them with ``tb.valid``). One model call over the packed row, logits computed only at
    the positions that predict a completion token (``logits_to_keep`` as an index tensor)."""
    import torch

    dev = next(model.parameters()).device
    keep, inverse = torch.unique(tb.predict_at, return_inverse=True)  # (K,), (B, C)
    out = model(
        input_ids=tb.input_ids.to(dev),
        position_ids=tb.position_ids.to(dev),
        attention_mask=prepared_mask(model, tb.attention_mask).to(dev),
        use_cache=False,
        logits_to_keep=keep.to(dev),
    )
    return out.logits[0][inverse.to(dev)]  # (B, C, V)
