"""Per-token log-probs of a pass's rollouts under a policy.

``rollout_logprobs`` runs the shared-prompt forward (each distinct prompt once, its G completions on its KV cache);
``completion_logprobs`` the plain left-padded one it equals; ``rollout_module`` wraps the policy so one micro-batch is
one module call for DDP/FSDP; ``no_grad_logprobs`` computes a rank's old or reference log-probs.
"""

from __future__ import annotations

from collections.abc import Sequence

from ratchet.loop.train.grpo.batch import PackedRollouts


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
