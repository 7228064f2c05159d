"""Generation throughput: transformers backend vs Ratchet's vLLM backend vs raw ``vllm.LLM.generate``.

All three run the same prompts (``--prompts`` held-out arithmetic questions with the demo's system prompt
and two worked examples) and the same sampling settings (``--n`` samples, temperature ``--temperature``,
``--max-new-tokens``). Both engines stay loaded (the vLLM adapter and the raw call share one) and each of
``--repeats`` (>= 5) rounds runs one pass of every backend (adapter, raw, HF, engine-only) in a rotating
order, so engine drift and a neighbour's load hit all alike; ratios are formed pass by pass and their
median reported with its spread. A greedy pass on both backends gives the share of prompts whose
completions are token-identical. Prints progress lines and, as its LAST line, a JSON object::

    {"hf_tokens_per_s", "vllm_tokens_per_s", "raw_vllm_tokens_per_s" (medians over passes), "greedy_match_rate",
     "adapter_overhead": median over passes of 1 - vllm / raw (target <= 0.03), "adapter_overhead_iqr",
     "adapter_overhead_min_max", "vllm_fraction_of_raw", "hf_fraction_of_raw", per-pass lists, ...,
     "adapter_overhead_vs_engine_only": median over passes of 1 - vllm / engine}

"raw" is what a vLLM user writes: chat-templated text in, vLLM tokenizing and detokenizing. Ratchet's
adapter hands vLLM token ids and skips vLLM's incremental detokenizing (it decodes each finished
completion once with the HF tokenizer), which on 2 CPU cores makes it faster than raw (negative
overhead). "engine only" (pre-tokenized ids, no detokenizing, outputs untouched) isolates the
adapter's own cost.

Run (vLLM lives in its own environment): ``.venv-vllm/bin/python benchmarks/generation_bench.py`` (a venv set up as docs/devices.md says).

``--backends transformers`` needs no vLLM and measures the transformers backend against the machine's bound: with no
other flag, the demo's evaluation shape (greedy, 128 demo chats, 32 new tokens, ``generation.batch_size``'s default).
Each of ``--repeats`` passes runs, in a rotating order: the backend's ``generate``; a forward pass over the same
tokens (each completion with its prompt, the same batches, threads and weights: the prefill rate, what the model's
arithmetic allows here); and plain ``model.generate`` (left padding, transformers' defaults), the baseline. Last line::

    {"hf_tokens_per_s", "prefill_tokens_per_s", "hf_fraction_of_bound" (median of per-pass ratios),
     "generate_tokens_per_s", "speedup_vs_generate", "greedy_match_rate" (vs plain generate), per-pass lists, ...}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "2")  # the reference machines have 2 cores
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SYSTEM = "Solve the arithmetic problem. Show the calculation, then give the final line as 'Answer: <number>'."


def chats(n: int, seed: int) -> list[list[dict[str, str]]]:
    """``n`` held-out arithmetic prompts as the demo renders them."""
    from ratchet.loop.tasks.sources import ArithmeticTasks, chat_messages

    src = ArithmeticTasks(("sum_small", "sum_2digit", "product_1digit", "linear_equation"))
    return [chat_messages(SYSTEM, src.fewshot(2), p.question) for p in src.draw(n, "heldout", seed)]


def raw_generate(backend, msgs, params) -> tuple[float, int]:
    """Plain ``LLM.generate`` on rendered text with vLLM's own tokenizing and detokenizing: (seconds, tokens)."""
    from vllm import SamplingParams as VSP

    texts = [backend.render(m) for m in msgs]  # the chat template, as any vLLM user would apply it
    sp = VSP(n=params.n, temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_new_tokens)
    t0 = time.perf_counter()
    outs = backend.llm.generate(texts, sp, use_tqdm=False)
    dt = time.perf_counter() - t0
    return dt, sum(len(c.token_ids) for o in outs for c in o.outputs)


def engine_generate(backend, msgs, params) -> tuple[float, int]:
    """The engine alone: pre-tokenized prompts, one shared ``SamplingParams``, no detokenizing, nothing built
    from the outputs. ``1 - adapter / engine`` is what Ratchet's adapter itself costs (rendering, tokenizing,
    decoding with the HF tokenizer, building records): (seconds, tokens)."""
    from vllm import SamplingParams as VSP

    ids = backend.tokenizer([backend.render(m) for m in msgs])["input_ids"]  # outside the timing
    sp = VSP(**backend.sampling_kwargs(params))
    t0 = time.perf_counter()
    outs = backend.llm.generate([{"prompt_token_ids": row} for row in ids], sp, use_tqdm=False)
    dt = time.perf_counter() - t0
    return dt, sum(len(c.token_ids) for o in outs for c in o.outputs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backends", default="transformers,vllm", help="'transformers' alone: the bound mode (no vLLM)")
    ap.add_argument("--prompts", type=int, default=None, help="default 32 (128 with --backends transformers)")
    ap.add_argument("--n", type=int, default=None, help="default 4 (1 with --backends transformers)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=None, help="default 0.8 (0, greedy, with --backends transformers)")
    ap.add_argument("--repeats", type=int, default=None, help="rounds of interleaved passes; default 5 (>= 5), 3 alone")
    ap.add_argument("--hf-batch-size", type=int, default=None, help="default: generation.batch_size's default")
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    from ratchet.loop.config import GenerationConfig

    args.hf_batch_size = args.hf_batch_size or GenerationConfig().batch_size
    if {b.strip() for b in args.backends.split(",")} == {"transformers"}:
        from generation_bound import bound_main

        return bound_main(args, chats(args.prompts or 128, args.seed))
    args.prompts, args.n = args.prompts or 32, args.n or 4
    args.temperature = 0.8 if args.temperature is None else args.temperature
    args.repeats = args.repeats or 5
    if args.repeats < 5:
        ap.error(f"--repeats ({args.repeats}) must be >= 5: fewer per-pass ratios cannot resolve a 3% overhead on a busy machine")

    from ratchet.loop.checkpoints import resolve_model
    from ratchet.loop.generation.sampling import SamplingParams, timed_generate
    from ratchet.loop.generation.transformers_backend import TransformersBackend
    from ratchet.loop.generation.vllm_backend import VLLMBackend

    model = resolve_model("smollm2-135m-instruct")
    msgs = chats(args.prompts, args.seed)
    sample = SamplingParams(n=args.n, temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=args.seed)
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=args.max_new_tokens)

    # Both engines stay loaded and every repeat runs one pass of each backend, in a rotating order, so a
    # neighbour's load or engine drift hits all of them alike; ratios are taken pass by pass.
    hf = TransformersBackend(model, batch_size=args.hf_batch_size)
    hf_greedy = hf.generate(msgs, greedy)
    vb = VLLMBackend(model)
    print(f"vllm engine loaded in {vb.load_s:.1f} s", flush=True)
    vb.generate(msgs[:4], SamplingParams(n=2, max_new_tokens=8))  # warm-up: first steps allocate buffers
    v_greedy = vb.generate(msgs, greedy)

    def tokens_per_s(fn, backend):  # one pass of fn -> completion tokens per second
        def run() -> float:
            if fn is timed_generate:
                return fn(backend, msgs, sample)[2]
            dt, ntok = fn(backend, msgs, sample)
            return ntok / dt

        return run

    runs = {
        "adapter": tokens_per_s(timed_generate, vb),
        "raw": tokens_per_s(raw_generate, vb),
        "hf": tokens_per_s(timed_generate, hf),
        "engine": tokens_per_s(engine_generate, vb),
    }
    passes: dict[str, list[float]] = {k: [] for k in runs}
    names = list(runs)
    for r in range(args.repeats):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            passes[name].append(runs[name]())
        print(f"pass {r} ({' > '.join(order)}): " + ", ".join(f"{k} {passes[k][-1]:.1f} tokens/s" for k in names), flush=True)
    hf.close()
    vb.close()

    ours, raw, engine, hf_runs = passes["adapter"], passes["raw"], passes["engine"], passes["hf"]
    overheads = [1 - a / b for a, b in zip(ours, raw)]  # per pass: same repeat, adjacent in time
    q = statistics.quantiles(overheads, n=4) if len(overheads) >= 2 else [overheads[0]] * 3
    match = sum(a.token_ids == b.token_ids for a, b in zip(v_greedy, hf_greedy)) / len(msgs)
    vllm_tps, raw_tps = statistics.median(ours), statistics.median(raw)
    print(
        json.dumps(
            {
                "hf_tokens_per_s": round(statistics.median(hf_runs), 1),
                "vllm_tokens_per_s": round(vllm_tps, 1),
                "raw_vllm_tokens_per_s": round(raw_tps, 1),
                "greedy_match_rate": round(match, 4),
                # median over passes of 1 - adapter / raw (target <= 0.03), with its spread
                "adapter_overhead": round(statistics.median(overheads), 4),
                "adapter_overhead_iqr": [round(q[0], 4), round(q[2], 4)],
                "adapter_overhead_min_max": [round(min(overheads), 4), round(max(overheads), 4)],
                "vllm_load_s": round(vb.load_s, 1),
                "vllm_tokens_per_s_passes": [round(x, 1) for x in ours],
                "raw_vllm_tokens_per_s_passes": [round(x, 1) for x in raw],
                "hf_tokens_per_s_passes": [round(x, 1) for x in hf_runs],
                "adapter_overhead_passes": [round(x, 4) for x in overheads],
                "vllm_fraction_of_raw": round(statistics.median(a / b for a, b in zip(ours, raw)), 4),
                "hf_fraction_of_raw": round(statistics.median(a / b for a, b in zip(hf_runs, raw)), 4),
                "engine_only_tokens_per_s": round(statistics.median(engine), 1),
                "engine_only_tokens_per_s_passes": [round(x, 1) for x in engine],
                "adapter_overhead_vs_engine_only": round(statistics.median(1 - a / e for a, e in zip(ours, engine)), 4),
                "prompts": len(msgs),
                "n": args.n,
                "max_new_tokens": args.max_new_tokens,
                "temperature": args.temperature,
                "repeats": args.repeats,
            }
        )
    )


if __name__ == "__main__":
    main()
