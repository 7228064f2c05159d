"""A GRPO pass's rollouts as token tensors, and their per-token log-probs under a policy.

``pack_rollouts`` lays out the sampled token ids (``trajectories.completion_token_ids``: what the engine sampled,
never a re-tokenization of the decoded text, which BPE does not round-trip) behind their chat prompts, with the
sampler's log-probs beside them; ``rollout_logprobs`` runs the shared-prompt forward (each distinct prompt once,
its G completions on its KV cache); ``rollout_module`` wraps it so one micro-batch is one module call for DDP/FSDP.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass

from ratchet.loop.generation.base import prompt_ids_hash, render_prompt
from ratchet.loop.train.examples import ChatExample


@dataclass(frozen=True)
class GRPOSample:
    """One completion of a group: its chat prompt, text and sampled ids (``example``), scalar reward, whether it
    hit the length cap, the sampler's per-token log-probs (nats, one per id; None when not requested) and the hash of
    the prompt ids it was sampled from (``loop.generation.base.prompt_ids_hash``; None when not stored)."""

    group: int
    example: ChatExample
    reward: float
    truncated: bool
    sampler_logprobs: tuple[float, ...] | None = None
    prompt_hash: str | None = None


@dataclass(frozen=True)
class PackedRollouts:
    """Completions tokenized once, with their prompts split for the shared-prompt forward.

    Every prompt is ``prefix + suffixes[row]``: ``prefix`` is the longest token prefix common to all
    prompts (system prompt and few-shot turns, ~97 of ~110 tokens in the demo) and ``suffixes[row]``
    the rest of one distinct prompt (a group's G completions share one row).
    """

    prefix: list[int]
    suffixes: list[list[int]]
    prompt_row: list[int]  # (N,) row of each completion's prompt in ``suffixes``
    completions: list[list[int]]  # (N,) sampled completion token ids (EOS included when it stopped)
    pad_id: int
    truncated_prompts: int = 0  # samples whose prompt lost tokens on the left to fit max_seq_len
    truncated_completions: int = 0  # samples whose completion lost its tail to fit prompt + completion <= max_seq_len
    sampler_lp: list[list[float] | None] | None = None  # (N,) the sampler's log-probs per completion (None: none stored)
    longest_sequence: int = 0  # tokens of the longest prompt + completion before any cut
    retokenized: int = 0  # samples without stored ids (an older store's rows): their text was tokenized
    prompt_mismatches: int = 0  # samples whose re-rendered prompt ids hash differently from the ones sampled from

    def sampler_tensor(self, rows: Sequence[int], width: int):
        """The sampler's log-probs of ``rows`` (B, width) float32, NaN where none is stored (padding included)."""
        import torch

        out = torch.full((len(rows), width), float("nan"), dtype=torch.float32)
        for i, r in enumerate(rows):
            lp = self.sampler_lp[r] if self.sampler_lp is not None else None
            if lp is not None:
                out[i, : min(len(lp), width)] = torch.tensor(lp[:width], dtype=torch.float32)
        return out

    def completion_tensors(self, rows: Sequence[int], width: int | None = None):
        """Right-padded completion ids (B, C) int64 and mask (B, C) bool for ``rows``; C = ``width`` or the longest."""
        import torch

        C = width or max(max(len(self.completions[r]) for r in rows), 1)
        ids = torch.full((len(rows), C), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), C), dtype=torch.bool)
        for i, r in enumerate(rows):
            c = self.completions[r][:C]
            ids[i, : len(c)] = torch.tensor(c, dtype=torch.long)
            mask[i, : len(c)] = True
        return ids, mask

    def full_layout(self, rows: Sequence[int]):
        """``[left pad][prompt][completion][right pad]`` for a plain forward (no cache).

        Returns:
            input_ids (B, P + C) int64, attention_mask (B, P + C) int64, completion_mask (B, C) bool, P (int).
        """
        import torch

        prompts = [self.prefix + self.suffixes[self.prompt_row[r]] for r in rows]
        P = max(map(len, prompts))
        comp, cmask = self.completion_tensors(rows)
        ids = torch.full((len(rows), P), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(rows), P), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, P - len(p) :] = torch.tensor(p, dtype=torch.long)
            attn[i, P - len(p) :] = 1
        return torch.cat([ids, comp], 1), torch.cat([attn, cmask.long()], 1), cmask, P


def pack_rollouts(tok, samples: Sequence[GRPOSample], max_seq_len: int) -> PackedRollouts:
    """Prompts (chat template, generation prompt) tokenized as at sampling time, and the sampled completion ids.

    A completion is its stored sampled ids (``example.completion_ids``); only a row of an older store without
    them has its text tokenized (EOS appended unless truncated), counted in ``retokenized``. Prompt + completion
    must fit ``max_seq_len``: a completion that does not loses its tail (counted in ``truncated_completions``;
    the kept prefix's log-probs are exact, as the prompt stays whole). Only a prompt that alone leaves no room is
    left-truncated (``truncated_prompts``). Identical prompts share one row; a prompt whose ids hash differently
    from the sample's ``prompt_hash`` (the template or tokenizer changed since sampling) is counted in
    ``prompt_mismatches``.
    """
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    rows: dict[str, int] = {}
    prompt_row, comps, lps = [], [], []
    for s in samples:
        text = render_prompt(tok, s.example.messages)
        prompt_row.append(rows.setdefault(text, len(rows)))
        if s.example.completion_ids is not None:
            comps.append(list(s.example.completion_ids))
        else:
            eos = [] if s.truncated else [tok.eos_token_id]
            comps.append(tok(s.example.completion, add_special_tokens=False)["input_ids"] + eos)
        lps.append(list(s.sampler_logprobs) if s.sampler_logprobs is not None else None)
    full = [tok(text, add_special_tokens=False)["input_ids"] for text in rows]
    hashes = [prompt_ids_hash(p) for p in full]
    mismatches = sum(bool(s.prompt_hash) and s.prompt_hash != hashes[r] for s, r in zip(samples, prompt_row))
    longest = max((len(full[r]) + len(c) for r, c in zip(prompt_row, comps)), default=0)
    cut_completions = 0
    for i, (r, c) in enumerate(zip(prompt_row, comps)):
        room = max_seq_len - len(full[r])
        keep = room if room >= 1 else max_seq_len // 2  # no room at all: the prompt is cut instead (below)
        cut_completions += len(c) > keep
        comps[i] = c[:keep]
        lps[i] = lps[i][:keep] if lps[i] is not None else None
    row_longest = [0] * len(rows)
    for r, c in zip(prompt_row, comps):
        row_longest[r] = max(row_longest[r], len(c))
    prompts = [p[-(max_seq_len - row_longest[r]) :] for r, p in enumerate(full)]
    cut_rows = {r for r, (p, q) in enumerate(zip(full, prompts)) if len(q) < len(p)}
    cut_prompts = sum(r in cut_rows for r in prompt_row)  # samples whose prompt lost tokens
    plen = len(os.path.commonprefix(prompts))
    plen = min(plen, min(map(len, prompts)) - 1)  # every row keeps >= 1 token of its own: its last hidden state
    return PackedRollouts(
        prompts[0][:plen],
        [p[plen:] for p in prompts],
        prompt_row,
        comps,
        pad,
        cut_prompts,
        cut_completions,
        lps if any(x is not None for x in lps) else None,
        longest,
        sum(s.example.completion_ids is None for s in samples),
        mismatches,
    )


def fit_message(packed: PackedRollouts, n: int, max_seq_len: int) -> str | None:
    """One line when ``pack_rollouts`` cut sequences to fit ``max_seq_len``: counts and the value that fits."""
    if not (packed.truncated_completions or packed.truncated_prompts):
        return None
    return (
        f"GRPO cut {packed.truncated_completions} of {n} completions and {packed.truncated_prompts} prompts: the longest "
        f"prompt + sampled completion is {packed.longest_sequence} tokens > sft.max_seq_len ({max_seq_len}); set "
        f"sft.max_seq_len >= {packed.longest_sequence} (or lower generation.max_new_tokens)"
    )


def _tokenize(tok, samples: Sequence[GRPOSample], max_seq_len: int):
    """Plain left-padded layout of ``samples`` (see ``PackedRollouts.full_layout``): ids, mask, completion ids, mask, P."""
    packed = pack_rollouts(tok, samples, max_seq_len)
    ids, attn, cmask, P = packed.full_layout(range(len(samples)))
    return ids, attn, ids[:, P:], cmask, P


def completion_logprobs(
    model, input_ids, attention_mask, P: int, temperature: float, with_entropy: bool = False, top_p: float = 1.0
):
    """Per-token log-probs (and entropy) of the completion under ``model``, from one plain forward.

    Positions come from the attention mask, so left-padded prompts get the positions they had at
    generation time. Logits are computed only where a completion token is predicted.

    Returns:
        logprobs (B, C) float32, entropy (B, C) float32 or None, and with ``top_p < 1`` the same tokens' log-probs
        renormalised over the top-p nucleus (B, C) float32, detached (``mismatch.nucleus_logprobs``; else None).
    """
    C = input_ids.shape[1] - P
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, P + C)
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False, logits_to_keep=C + 1
    ).logits[:, :-1]  # (B, C, V)
    return _scores(logits, input_ids[:, P:], temperature, with_entropy, top_p)


def _scores(logits, ids, temperature: float, with_entropy: bool, top_p: float):
    """(log-probs, entropy or None, nucleus log-probs or None) of ``ids`` (B, C) from ``logits`` (B, C, V)."""
    import torch

    from ratchet.loop.train.losses import entropy_from_logits, token_logprobs
    from ratchet.loop.train.mismatch import nucleus_logprobs

    lp = token_logprobs(logits, ids, temperature)
    ent = entropy_from_logits(logits.detach(), temperature) if with_entropy else None
    if top_p >= 1.0:
        return lp, ent, None
    with torch.no_grad():
        return lp, ent, nucleus_logprobs(logits.detach(), ids, temperature, top_p)


def rollout_logprobs(
    model,
    packed: PackedRollouts,
    rows: Sequence[int],
    temperature: float,
    *,
    with_entropy: bool = False,
    shared: bool = True,
    top_p: float = 1.0,
):
    """Per-token log-probs (and entropy) of the completions ``rows``, prompts computed once.

    With ``shared``: the common prefix runs once, each distinct prompt's suffix once on top of it,
    and the G completions of a group attend to that prompt's KV cache, selected per row (the cache
    keeps the graph, so gradients flow back through the shared prompt and sum over its rows). The
    sequence layout is ``[prefix][pad][suffix][completion]`` with positions from the mask, which is
    the same computation as the plain left-padded forward (``completion_logprobs``; a test checks
    values and gradients), with ~2.4x fewer tokens for G = 4 and the demo's prompts. ``shared=False``
    runs that plain forward (needed under gradient checkpointing, which drops the cache).

    Returns:
        logprobs (B, C) float32, entropy (B, C) float32 or None, nucleus log-probs (B, C) float32 or None (as
        ``completion_logprobs``); C = longest completion in ``rows``.
    """
    import torch

    dev = next(model.parameters()).device
    if not shared:
        ids, attn, _, P = packed.full_layout(rows)
        return completion_logprobs(model, ids.to(dev), attn.to(dev), P, temperature, with_entropy, top_p)
    prompt_rows = sorted({packed.prompt_row[r] for r in rows})
    where = {g: i for i, g in enumerate(prompt_rows)}
    plen, cache = len(packed.prefix), None
    if plen:
        cache = model(input_ids=torch.tensor([packed.prefix], device=dev), use_cache=True, logits_to_keep=1).past_key_values
        cache.batch_select_indices(torch.zeros(len(prompt_rows), dtype=torch.long, device=dev))  # (G_rows, ..., plen, d)
    S = max(len(packed.suffixes[g]) for g in prompt_rows)
    suf = torch.full((len(prompt_rows), S), packed.pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompt_rows), plen + S), dtype=torch.long)
    mask[:, :plen] = 1
    for i, g in enumerate(prompt_rows):
        t = packed.suffixes[g]
        suf[i, S - len(t) :] = torch.tensor(t, dtype=torch.long)
        mask[i, plen + S - len(t) :] = 1
    suf, mask = suf.to(dev), mask.to(dev)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)[:, plen:]  # (G_rows, S)
    out = model(input_ids=suf, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True, logits_to_keep=1)
    sel = torch.tensor([where[packed.prompt_row[r]] for r in rows], dtype=torch.long, device=dev)  # (B,)
    first = out.logits[:, -1][sel]  # (B, V): predicts each completion's first token
    cache = out.past_key_values
    cache.batch_select_indices(sel)  # (B, ..., plen + S, d)
    comp, cmask = packed.completion_tensors(rows)
    comp, cmask = comp.to(dev), cmask.to(dev)
    full = torch.cat([mask[sel], cmask.long()], 1)  # (B, plen + S + C)
    pos = (full.cumsum(-1) - 1).clamp(min=0)[:, plen + S :]  # (B, C)
    out = model(input_ids=comp, attention_mask=full, position_ids=pos, past_key_values=cache, use_cache=True)
    logits = torch.cat([first.unsqueeze(1), out.logits[:, :-1]], 1)  # (B, C, V)
    return _scores(logits, comp, temperature, with_entropy, top_p)


def _group_order(packed: PackedRollouts, n: int, rng: random.Random) -> list[int]:
    """Row indices shuffled by prompt (a group's completions stay adjacent, so micro-batches share prompts)."""
    by_prompt: dict[int, list[int]] = {}
    for i in range(n):
        by_prompt.setdefault(packed.prompt_row[i], []).append(i)
    groups = list(by_prompt.values())
    rng.shuffle(groups)
    return [i for g in groups for i in g]


def rollout_module(policy, data: tuple | None = None):
    """The policy wrapped so that one micro-batch's log-probs are ONE module call (DDP/FSDP see one forward
    per backward even though the shared-prompt path calls the model three times). ``module.data`` holds the
    pass's rollouts ``(packed, temperature, shared, width, top_p)``; a learner sets it anew for every pass.
    A call returns ``rollout_logprobs``'s triple padded back to the pass's width (B, width)."""
    import torch

    pad_to = lambda x, w: torch.nn.functional.pad(x, (0, w - x.shape[1])) if x is not None else None  # noqa: E731

    class RolloutLogprobs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.policy = policy
            self.data = data
            self._no_split_modules = getattr(policy, "_no_split_modules", None)  # FSDP auto-wrap by layer class

        def forward(self, rows: list[int], with_entropy: bool = False):
            packed, temp, shared, width, top_p = self.data
            out = rollout_logprobs(self.policy, packed, rows, temp, with_entropy=with_entropy, shared=shared, top_p=top_p)
            return tuple(pad_to(x, width) for x in out)

    return RolloutLogprobs()


def no_grad_logprobs(model, *, shape: tuple[int, int], mine: list[int], passes: int, micro: int, nucleus: bool, device):
    """Per-token log-probs of this rank's rows under ``model`` without grad: ``(N, C)`` float32, and the nucleus
    (top-p renormalised) log-probs when ``nucleus`` (else None); rows only other ranks train on stay 0."""
    import torch

    out = torch.zeros(shape, dtype=torch.float32, device=device)
    sup = out.clone() if nucleus else None  # the nucleus log-probs, for the sampler comparison
    with torch.no_grad():
        for a in range(passes):  # the same number of calls on every rank (FSDP gathers weights in each)
            rows = mine[a * micro : (a + 1) * micro] or mine[:1]
            lp, _, lp_sup = model(rows)
            out[torch.tensor(rows, device=device)] = lp
            if sup is not None:
                sup[torch.tensor(rows, device=device)] = lp_sup
    return out, sup
