"""``generation_bench.py --backends transformers``: the transformers backend against the prefill bound and against plain
``model.generate``, passes interleaved (see generation_bench.py's docstring for what is printed)."""

from __future__ import annotations

import json
import statistics
import time


def left_padded(rows: list[list[int]], pad_id: int):
    """(B, W) int64 ids and attention mask of ``rows`` left-padded to the longest."""
    import torch

    width = max(map(len, rows))
    x = torch.full((len(rows), width), pad_id)
    m = torch.zeros((len(rows), width), dtype=torch.long)
    for k, r in enumerate(rows):
        x[k, width - len(r) :], m[k, width - len(r) :] = torch.tensor(r), 1
    return x, m


def prefill_tokens_per_s(backend, msgs, completions, batch_size: int) -> float:
    """A forward pass over every completion with its prompt, in the backend's batches (left padded), with the weights
    as the backend multiplies them (``onednn_linears``): non-pad tokens / second. Logits for every position."""
    import torch

    from ratchet.loop.generation.decoding import onednn_linears
    from ratchet.loop.generation.sampling import prompt_token_ids

    ids = prompt_token_ids(backend.tokenizer, msgs)
    seqs = sorted((ids[c.prompt_index] + list(c.token_ids) for c in completions), key=len)
    tokens, seconds = 0, 0.0
    with onednn_linears(backend.model), torch.inference_mode():
        for s in range(0, len(seqs), batch_size):
            x, m = left_padded(seqs[s : s + batch_size], backend.tokenizer.pad_token_id)
            t0 = time.perf_counter()
            backend.model(input_ids=x, attention_mask=m, use_cache=False)
            seconds += time.perf_counter() - t0
            tokens += int(m.sum())
    return tokens / seconds


def plain_generate(backend, msgs, params, batch_size: int) -> tuple[float, list[list[int]]]:
    """What a transformers user writes: left-padded batches through ``model.generate`` with transformers' defaults
    (its SDPA attention, ``F.linear``): (completion tokens / s, each row's ids through its first EOS)."""
    import torch

    from ratchet.loop.generation.sampling import prompt_token_ids

    ids = prompt_token_ids(backend.tokenizer, msgs)
    attn = backend.model.config._attn_implementation
    backend.model.set_attn_implementation("sdpa")
    out: list[list[int]] = []
    t0 = time.perf_counter()
    try:
        for s in range(0, len(ids), batch_size):
            x, m = left_padded(ids[s : s + batch_size], backend.tokenizer.pad_token_id)
            width = x.shape[1]
            with torch.inference_mode():
                gen = backend.model.generate(input_ids=x, attention_mask=m, max_new_tokens=params.max_new_tokens,
                                             do_sample=False, pad_token_id=backend.tokenizer.pad_token_id,
                                             eos_token_id=sorted(backend.eos_ids))[:, width:]  # fmt: skip
            for row in gen.tolist():
                end = next((k + 1 for k, t in enumerate(row) if t in backend.eos_ids), len(row))
                out.append(row[:end])
    finally:
        backend.model.set_attn_implementation(attn)
    return sum(map(len, out)) / (time.perf_counter() - t0), out


def bound_main(args, msgs) -> None:
    from ratchet.loop.checkpoints import resolve_model
    from ratchet.loop.generation.sampling import SamplingParams, timed_generate
    from ratchet.loop.generation.transformers_backend import TransformersBackend

    n = args.n or 1
    temperature = 0.0 if args.temperature is None else args.temperature
    repeats = args.repeats or 3
    params = SamplingParams(n=n, temperature=temperature, max_new_tokens=args.max_new_tokens, seed=args.seed)
    backend = TransformersBackend(resolve_model("smollm2-135m-instruct"), batch_size=args.hf_batch_size)
    backend.generate(msgs[:4], params)  # warm-up
    last: dict = {}

    def ours() -> float:
        out, _, tps = timed_generate(backend, msgs, params)
        last["ours"] = out
        return tps

    def bound() -> float:
        return prefill_tokens_per_s(backend, msgs, last.get("ours") or backend.generate(msgs, params), args.hf_batch_size)

    def baseline() -> float:
        if temperature > 0:
            return float("nan")  # the baseline is greedy generate; sampled shapes report ours and the bound only
        tps, last["plain"] = plain_generate(backend, msgs, params, args.hf_batch_size)
        return tps

    runs = {"hf": ours, "prefill": bound, "generate": baseline}
    passes: dict[str, list[float]] = {k: [] for k in runs}
    names = list(runs)
    for r in range(repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        if order[0] == "prefill":  # the bound pass needs this pass's completions
            order = ["hf", *[x for x in order if x != "hf"]]
        for name in order:
            passes[name].append(runs[name]())
        print(f"pass {r} ({' > '.join(order)}): " + ", ".join(f"{k} {passes[k][-1]:.1f} tokens/s" for k in names), flush=True)
    fractions = [h / p for h, p in zip(passes["hf"], passes["prefill"])]
    match = None
    if "plain" in last:
        match = sum(list(c.token_ids) == p for c, p in zip(last["ours"], last["plain"])) / len(msgs)
    speedups = [h / g for h, g in zip(passes["hf"], passes["generate"])] if temperature == 0 else []
    print(
        json.dumps(
            {
                "hf_tokens_per_s": round(statistics.median(passes["hf"]), 1),
                "prefill_tokens_per_s": round(statistics.median(passes["prefill"]), 1),
                "hf_fraction_of_bound": round(statistics.median(fractions), 4),
                "generate_tokens_per_s": round(statistics.median(passes["generate"]), 1) if speedups else None,
                "speedup_vs_generate": round(statistics.median(speedups), 3) if speedups else None,
                "greedy_match_rate": match,
                "hf_tokens_per_s_passes": [round(x, 1) for x in passes["hf"]],
                "prefill_tokens_per_s_passes": [round(x, 1) for x in passes["prefill"]],
                "generate_tokens_per_s_passes": [round(x, 1) for x in passes["generate"]] if speedups else None,
                "hf_fraction_of_bound_passes": [round(x, 4) for x in fractions],
                "prompts": len(msgs),
                "n": n,
                "max_new_tokens": args.max_new_tokens,
                "temperature": temperature,
                "batch_size": args.hf_batch_size,
                "repeats": repeats,
            }
        )
    )
