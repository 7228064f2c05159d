"""A GRPO pass's rollouts as token tensors, and their group advantages.

``pack_rollouts`` lays out the sampled token ids (``trajectories.completion_token_ids``: what the engine sampled,
never a re-tokenization of the decoded text, which BPE does not round-trip) behind their chat prompts, with the
sampler's log-probs beside them; ``group_advantages`` scores each completion against its group's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from ratchet.loop.generation.sampling import prompt_ids_hash, render_prompt
from ratchet.loop.train.examples import ChatExample, read_token_count


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
    unread_tokens: int = 0  # sampled ids past what the verifier read (verdicts.read_chars): masked out, never trained on
    sampled_tokens: int = 0  # sampled ids of the samples before that mask
    model_masks: list[list[int] | None] | None = None  # (N,) a multi-turn episode's 1 = model token, 0 = environment

    def model_token_mask(self, rows: Sequence[int], width: int):
        """(B, width) bool: True on the ids the model sampled (every id of a single-turn completion; a multi-turn
        episode's environment tokens False). AND it with ``completion_tensors``' mask for the loss: the environment's
        tokens are attended to, never trained on, and carry no sampler log-prob."""
        import torch

        out = torch.ones((len(rows), width), dtype=torch.bool)
        for i, r in enumerate(rows):
            m = self.model_masks[r] if self.model_masks is not None else None
            if m is not None:
                out[i, : min(len(m), width)] = torch.tensor(m[:width], dtype=torch.bool)
        return out

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
    the kept prefix's log-probs are exact, as the prompt stays whole). Sampled ids past what the verifier read
    (``example.read_chars``; ``read_token_count``) are masked out of the loss (``unread_tokens``); a multi-turn
    episode's stream is kept whole, its environment tokens masked by ``model_masks`` (``example.completion_mask``). Only a prompt that alone leaves no room is
    left-truncated (``truncated_prompts``). Identical prompts share one row; a prompt whose ids hash differently
    from the sample's ``prompt_hash`` (the template or tokenizer changed since sampling) is counted in
    ``prompt_mismatches``.
    """
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    rows: dict[str, int] = {}
    prompt_row, comps, lps, masks = [], [], [], []
    unread = sampled = 0
    for s in samples:
        text = render_prompt(tok, s.example.messages)
        prompt_row.append(rows.setdefault(text, len(rows)))
        if s.example.completion_ids is not None:
            ids = list(s.example.completion_ids)
            # past the verifier's read span the tokens carry no credit: masked (a causal model's kept log-probs
            # do not depend on the tokens after them, so the tail is dropped); the sampler's log-probs likewise
            multi = s.example.completion_mask is not None  # an episode: the verifier's span is its last message's,
            # so the stream stays whole, unless the verifier read nothing (a verifier_error): then none of it trains
            k = (0 if s.example.read_chars == 0 else None) if multi else read_token_count(tok, ids, s.example.read_chars)
            sampled += len(ids)
            unread += 0 if k is None else len(ids) - k
            comps.append(ids if k is None else ids[:k])
        else:
            eos = [] if s.truncated else [tok.eos_token_id]
            comps.append(tok(s.example.completion, add_special_tokens=False)["input_ids"] + eos)
        lps.append(list(s.sampler_logprobs)[: len(comps[-1])] if s.sampler_logprobs is not None else None)
        m = s.example.completion_mask
        masks.append(None if m is None or s.example.completion_ids is None else list(m)[: len(comps[-1])])
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
        masks[i] = masks[i][:keep] if masks[i] is not None else None
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
        unread,
        sampled,
        masks if any(m is not None for m in masks) else None,
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


def group_advantages(samples: Sequence[GRPOSample], estimator: str, dynamic_sampling: bool):
    """Advantages per sample and the kept sample indices.

    Returns:
        advantages (N,) float32 aligned with ``samples``, kept indices (list[int]), zero-variance group count.
    Raises:
        ValueError: groups of unequal size, or G < 2.
    """
    import torch

    from ratchet.loop.train.advantages import compute_advantages, zero_variance_mask

    groups: dict[int, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(s.group, []).append(i)
    sizes = {len(v) for v in groups.values()}
    if len(sizes) != 1:
        raise ValueError(f"groups have unequal sizes {sorted(sizes)}; every prompt needs the same G completions")
    order = [groups[g] for g in sorted(groups)]
    rewards = torch.tensor([[samples[i].reward for i in idx] for idx in order], dtype=torch.float32)  # (num_groups, G)
    adv = compute_advantages(estimator, rewards)  # (num_groups, G)
    zero = zero_variance_mask(rewards)  # (num_groups,)
    out = torch.zeros(len(samples), dtype=torch.float32)
    kept: list[int] = []
    for g, idx in enumerate(order):
        out[idx] = adv[g]
        if not (dynamic_sampling and bool(zero[g])):
            kept += idx
    return out, sorted(kept), int(zero.sum())
