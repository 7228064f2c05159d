"""The transformers backend's decode loop: a preallocated KV cache, rows that leave the batch when they finish,
grouped-query attention without copying the KV heads, and oneDNN-packed weights on CPU.

``model.generate`` on 2 CPU cores ran the demo's evaluation shape (SmolLM2-135M, batches of 32, 32 new tokens) at ~15-25%
of what a forward pass over the same tokens reaches (``benchmarks/generation_bench.py --backends transformers``). Its
per-step costs, measured with torch's profiler: ``DynamicCache`` grows every layer's keys and values with ``torch.cat``
(17% of the time); transformers' SDPA path copies the 3 KV heads to the 9 query heads (``repeat_kv``) whenever a mask
is given, which every left-padded batch has (at B=32, L=150: 132 ms per step over 30 layers, against 8 ms for
``scaled_dot_product_attention(..., enable_gqa=True)``, which gives the same values); and finished rows keep decoding
to the longest row's end (in the demo ~30% of the decoded tokens were past an EOS). This loop fixes all three and keeps
the arithmetic of every row the same, so greedy outputs equal ``model.generate``'s (``tests/loop/generation``). What
remained was the matrix products: a decode step multiplies a few rows by every weight, and the default GEMM re-packs
each weight on every call; ``onednn_linears`` packs them once (1.6x on the whole generation here).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

GQA_ATTENTION = "ratchet_sdpa_gqa"  # the attention implementation name registered with transformers
COMPACT_FRACTION = 0.25  # finished rows leave the batch once they are this share of its rows (a compaction copies the cache)


def sdpa_gqa_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' SDPA attention, with grouped-query heads passed to ``scaled_dot_product_attention`` as they are
    (``enable_gqa=True``) instead of being copied to every query head when a mask is given.

    Args:
        query: (B, H, q, D) float; key, value: (B, KV, k, D) with H a multiple of KV.
        attention_mask: (B, 1, q, k) bool (True = attend) or None.

    Returns:
        ((B, q, H, D) attention output, None), as transformers' attention functions return.
    """
    q_len, kv_len = query.shape[2], key.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = q_len > 1 and attention_mask is None and causal
    plain = key.shape[1] == query.shape[1] or kwargs.get("position_bias") is not None or kwargs.get("cache") is not None
    if plain or (causal and kv_len > q_len):  # the cases transformers' own function handles specially
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)  # fmt: skip
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


def register_attention() -> str:
    """Register ``sdpa_gqa_attention`` (and SDPA's mask function for it) with transformers; returns its name for
    ``model.set_attn_implementation``. Idempotent."""
    AttentionInterface.register(GQA_ATTENTION, sdpa_gqa_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(GQA_ATTENTION, sdpa_mask)
    return GQA_ATTENTION


@contextlib.contextmanager
def onednn_linears(model, packed: dict | None = None) -> Iterator[int]:
    """Inside the block, every float32 CPU ``nn.Linear`` of ``model`` multiplies with a oneDNN copy of its weight
    (``Tensor.to_mkldnn``, a blocked layout packed once), as ``torch.utils.mkldnn.to_mkldnn`` does, without changing the
    module (its parameters, state dict and autograd stay as they are; the copies are dropped on exit).

    Why: a decode step multiplies a few rows by every weight once, and the default GEMM re-packs the weight on every
    call. Measured on 2 cores over SmolLM2-135M's 211 weight matrices (each used once, as in a step): 90 ms at 32 rows
    with ``F.linear`` against 46 ms with packed weights, 198 ms against 101 ms at 128; and 753 against 1,076 tokens/s
    at 2,048 rows. The products differ from ``F.linear``'s in the last bits (~1e-4 on 576-wide rows).

    Args:
        packed: a dict the caller keeps between calls and clears whenever it changes the weights: a layer found in it
            (same module, same storage) reuses its packed copy instead of packing again (~0.15 s for SmolLM2-135M).
            None: pack on every call, for weights that change where the caller cannot see (a co-located learner's:
            fused AdamW updates them in place without bumping ``Tensor._version``).

    Yields:
        the number of layers switched (0 where oneDNN is not available or the model is not float32 on CPU).
    """
    layers = [
        m for m in model.modules()
        if isinstance(m, torch.nn.Linear) and m.weight.device.type == "cpu" and m.weight.dtype == torch.float32
    ]  # fmt: skip
    if not torch.backends.mkldnn.is_available() or not layers:
        yield 0
        return
    packed = {} if packed is None else packed
    for m in layers:
        stamp = tuple(p.data_ptr() for p in (m.weight, m.bias) if p is not None)
        if id(m) not in packed or packed[id(m)][0] != stamp:
            bias = m.bias.detach() if m.bias is not None else m.weight.new_zeros(m.weight.shape[0])
            packed[id(m)] = (stamp, m.weight.detach().to_mkldnn(), bias.to_mkldnn())
        _, w, b = packed[id(m)]

        def forward(x, w=w, b=b, out=m.weight.shape[0]):
            y = torch._C._nn.mkldnn_linear(x.reshape(-1, x.shape[-1]).to_mkldnn(), w, b).to_dense()
            return y.view(*x.shape[:-1], out)

        m.forward = forward
    try:
        yield len(layers)
    finally:
        for m in layers:
            del m.forward  # the class's forward again


class PreallocatedLayer(DynamicLayer):
    """One layer's keys and values in buffers with room for ``capacity`` positions: a step writes its position in
    place (``DynamicLayer`` concatenates, copying the whole cache every step); ``keys``/``values`` are views of the
    filled part, (B, KV, length, D)."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity, self.length = capacity, 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, _ = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        self.k_buf = key_states.new_empty((b, h, self.capacity, key_states.shape[-1]))
        self.v_buf = value_states.new_empty((b, h, self.capacity, value_states.shape[-1]))
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        if self.length + n > self.capacity:  # never in the decode loop (it sizes the buffer); kept correct anyway
            self.capacity = max(2 * self.capacity, self.length + n)
            self._move(torch.arange(self.k_buf.shape[0], device=self.device))
        self.k_buf[:, :, self.length : self.length + n] = key_states
        self.v_buf[:, :, self.length : self.length + n] = value_states
        self.length += n
        self._views()
        return self.keys, self.values

    def _views(self) -> None:
        self.keys, self.values = self.k_buf[:, :, : self.length], self.v_buf[:, :, : self.length]

    def _move(self, rows: torch.Tensor) -> None:
        """Keep ``rows`` (a (B',) int64 index) of the batch, in new buffers of ``capacity`` positions."""
        k = self.k_buf.new_empty((len(rows), self.k_buf.shape[1], self.capacity, self.k_buf.shape[-1]))
        v = self.v_buf.new_empty((len(rows), self.v_buf.shape[1], self.capacity, self.v_buf.shape[-1]))
        k[:, :, : self.length] = self.k_buf[rows, :, : self.length]
        v[:, :, : self.length] = self.v_buf[rows, :, : self.length]
        self.k_buf, self.v_buf = k, v
        self._views()

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._move(indices)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            self._move(torch.arange(self.k_buf.shape[0], device=self.device).repeat_interleave(repeats))

    def reset(self) -> None:
        self.length, self.is_initialized = 0, False
        self.keys = self.values = None


def new_cache(model, capacity: int) -> DynamicCache:
    """A cache for ``model`` whose full-attention layers are ``PreallocatedLayer`` s of ``capacity`` positions (other
    layer kinds, e.g. sliding windows, stay the ones transformers makes for the model's config)."""
    cache = DynamicCache(config=model.config)
    cache.layers = [PreallocatedLayer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


@dataclass
class Decoded:
    """One row's generated tokens (ending at its EOS or stop string when it stopped) and, when asked, their log-probs."""

    token_ids: list[int]
    logprobs: list[float] | None


def prefill_prefix(model, prefix: Sequence[int], device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The shared prefix's keys and values per layer, each (1, KV, P, D), from one forward pass."""
    with torch.inference_mode():
        cache = model(torch.tensor([list(prefix)], device=device), use_cache=True).past_key_values
    return [(layer.keys, layer.values) for layer in cache.layers]


def decode(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    eos_ids: set[int],
    prefix: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    processors=None,
    do_sample: bool = False,
    generator: torch.Generator | None = None,
    stopping=None,
    logprobs: bool = False,
) -> list[Decoded]:
    """Decode a left-padded batch to EOS, a stop string or ``max_new_tokens``; what ``model.generate`` computes for each
    row, with finished rows leaving the batch.

    Args:
        input_ids: (B, W) int64, laid out ``[prefix][left padding][own tokens]`` (no prefix: ``[padding][tokens]``).
        attention_mask: (B, W) int64, 1 on real tokens.
        prefix: ``prefill_prefix`` of ``input_ids[0, :P]`` (every row's first P ids), or None.
        processors: a ``LogitsProcessorList`` applied to the float32 next-token logits (temperature, top-p).
        do_sample: draw from softmax of the processed logits with ``generator``; else argmax (greedy).
        stopping: a ``StoppingCriteria`` called as ``stopping(ids, scores)`` on each row's (prompt + generated) ids,
            returning a (B,) bool: transformers' ``StopStringCriteria``.
        logprobs: also return log softmax(processed logits) at each sampled token (vLLM's ``processed_logprobs``).

    Returns:
        one ``Decoded`` per row, in row order.
    """
    b, width = input_ids.shape
    plen = prefix[0][0].shape[2] if prefix else 0
    cache = new_cache(model, width + max_new_tokens)
    if prefix:
        for layer, (k, v) in zip(cache.layers, prefix):
            layer.update(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1))
    positions = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)  # (B, W), as generate computes them
    eos = torch.tensor(sorted(eos_ids), device=input_ids.device, dtype=torch.long)
    out = [Decoded([], [] if logprobs else None) for _ in range(b)]
    rows = list(range(b))  # batch row -> output row
    finished = torch.zeros(b, dtype=torch.bool, device=input_ids.device)
    seqs, mask = input_ids, attention_mask
    with torch.inference_mode():
        logits = model(input_ids=input_ids[:, plen:], attention_mask=mask, position_ids=positions[:, plen:],
                       past_key_values=cache, use_cache=True, logits_to_keep=1).logits  # fmt: skip
        last = positions[:, -1]
        for step in range(max_new_tokens):
            scores = logits[:, -1, :].to(dtype=torch.float32)
            if processors:
                scores = processors(seqs, scores)
            if do_sample:
                nxt = torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=generator).squeeze(1)
            else:
                nxt = torch.argmax(scores, dim=-1)
            lps = torch.log_softmax(scores, dim=-1).gather(1, nxt[:, None]).squeeze(1).tolist() if logprobs else None
            seqs = torch.cat([seqs, nxt[:, None]], dim=1)
            done = torch.isin(nxt, eos)
            if stopping is not None:
                done |= stopping(seqs, scores)
            for k, (r, t, fin) in enumerate(zip(rows, nxt.tolist(), finished.tolist())):
                if not fin:
                    out[r].token_ids.append(t)
                    if lps is not None:
                        out[r].logprobs.append(lps[k])
            finished |= done
            if bool(finished.all()) or step == max_new_tokens - 1:
                break
            if int(finished.sum()) >= max(1, COMPACT_FRACTION * len(rows)):
                keep = (~finished).nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                rows = [rows[i] for i in keep.tolist()]
                seqs, mask, nxt, last, finished = seqs[keep], mask[keep], nxt[keep], last[keep], finished[keep]
            mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
            last = last + 1
            logits = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=last[:, None], past_key_values=cache,
                           use_cache=True).logits  # fmt: skip
    return out
