"""A GPU check of Ratchet, prepared as one command for a machine with one GPU, no model hub and nothing installed.

On randomly initialised Qwen2-style models of real size (the shapes of Qwen2.5-0.5B and -1.5B; ``--tiny``: 2 layers,
hidden 64, a 512-token vocabulary) it measures, per model:

- ``ours``: Ratchet's persistent GRPO step as a persistent round's rollout worker runs it
  (``ratchet.flows.compute.worker``: a ``TransformersBackend`` that generates from the ``GRPOLearner``'s own module via
  ``share_module``, then ``GRPOLearner.train_pass``), here in this one process (no request files between the two);
  seconds per step, split into generation and train pass, the engine's generation tokens/s, peak GPU memory. Once
  in bf16 and once in fp32 (``bf16_vs_fp32``: the ratio of the two step medians).
- ``trl``: TRL's ``GRPOTrainer`` on the same model, prompts, G, lengths, optimizer and dtype (``grpo_parity.py``: the
  settings ``grpo_vs_trl.py`` compares too; gradient checkpointing off on both sides), same process, one after
  the other; ``ratio`` = ours' median step / TRL's median step (the median-ratio rule: one slow step moves neither).
  Without TRL (or its ``datasets``) the TRL figures are null and ``trl.reason`` says why.
- ``weight_sync_ok``: after the timed steps one more pass at a large LR (1e-3, so the policy moves far from its
  start) and then the learner's own greedy tokens on fixed prompts must equal (a) a fresh engine's loaded from the
  learner's saved policy (the round's candidate, what the next round loads) and (b) an engine holding the starting
  weights after ``TransformersBackend.update_weights(learner.state_dict())`` (the in-place path of an engine that
  does not share the learner's module); and (b)'s engine must have given other tokens before its update, so the
  check can fail. ``weight_sync_s`` per route the transformers engine has (``shared_module``: the learner's own
  module, nothing moves; ``memory``: ``update_weights`` from the learner's tensors; ``checkpoint``: from the saved
  folder) and ``route_weights_equal``: after each route the engine's weights equal the learner's exactly.

A step is ``--prompts-per-step`` prompts x ``--group-size`` completions of ``--max-new-tokens`` tokens (a random model
rarely stops early, so every completion runs to the cap and truncated completions are kept in the loss on both
sides); the reward is a fixed function of the completion's words (varied, so advantages are not zero). Step medians
leave out step 0 (CUDA warm-up) when there are more steps. Each phase is skipped, with the reason, when the time
left (``--budget-s``, from the start) cannot hold it judged by the previous model's phase scaled by parameter count.
A phase that raises is recorded in ``failed`` (its traceback on stderr) and the others still run; the exit status
is then 1.

Runs from a plain checkout without ``pip install``: it maps the ``ratchet`` namespace onto the repository's top-level
folders (as pyproject.toml's package-dir does) and builds its tokenizer in memory. Needs torch, transformers,
accelerate, tokenizers, safetensors and pydantic (Ratchet's config models); TRL (+ datasets) is optional.

Prints progress and, as its LAST line, one JSON object: ``device``, ``gpu``, versions, ``settings``, ``trl``
(``{"version", "reason"}``), ``weight_sync_ok`` (all models), ``wall_s`` and ``models`` (per size: ``params_m``,
``ours_bfloat16`` / ``ours_float32`` / ``trl`` phases with ``s_per_step``, ``step_s``, ``gen_s``, ``train_s``,
``gen_tokens_per_s``, ``peak_gpu_mb``; ``ratio``, ``bf16_vs_fp32``, ``weight_sync``, ``skipped``, ``failed``).

Run: ``python3 benchmarks/gpu_check.py`` on the GPU machine (sized for <= 8 min on one H200, not yet run on one;
``--budget-s`` skips what would run past 420 s); ``--device cpu --tiny`` anywhere
(< 1 min; the CI test); ``--device cpu --sizes 0.5b --steps 1`` runs the real-size path on a CPU (slow: one fp32 step
of 2 x 2 completions took 323 s on a loaded 2-core machine).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.machinery
import importlib.util
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Qwen2-style shapes: (hidden, intermediate, layers, heads, kv heads, vocabulary); embeddings tied as in Qwen2.5.
SIZES = {
    "tiny": (64, 128, 2, 4, 2, 512),
    "0.5b": (896, 4864, 24, 14, 2, 151936),  # Qwen2.5-0.5B
    "1.5b": (1536, 8960, 28, 12, 2, 151936),  # Qwen2.5-1.5B
}
SYNC_LR = 1e-3  # the weight-sync check's own pass: far enough from the start that greedy tokens change
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # pad, turn start, EOS (Qwen2's names)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Qwen2's pre-tokenizer split (transformers' Qwen2Tokenizer rebuilds exactly this pipeline from vocab and merges)
QWEN2_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def map_ratchet_namespace(root: Path = ROOT) -> None:
    """Make ``ratchet.X`` import ``root/X`` (pyproject.toml maps ``ratchet.common`` -> ``common/``, ``ratchet.loop.train``
    -> ``loop/train/``, ...: the folders one to one), so the check runs from a checkout with nothing installed. A
    ``ratchet`` imported already (an installed one) is left as it is."""
    if "ratchet" in sys.modules:
        return
    spec = importlib.machinery.ModuleSpec("ratchet", None, is_package=True)
    pkg = importlib.util.module_from_spec(spec)
    pkg.__path__ = [str(root)]
    sys.modules["ratchet"] = pkg


def byte_chars() -> list[str]:
    """The 256 printable characters byte-level BPE writes bytes as (GPT-2's ``bytes_to_unicode``), in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


def filler(i: int) -> str:
    """Filler token ``i`` as byte-level text: a space and ``i + 26`` in base 26 written a..z (``Ġba``, ``Ġbb``, ...)."""
    n, word = i + 26, ""
    while n:
        n, r = divmod(n, 26)
        word = chr(ord("a") + r) + word
    return "Ġ" + word


def build_tokenizer(vocab_size: int):
    """A Qwen2-style byte-level BPE of exactly ``vocab_size`` tokens, built in memory: the 256 byte characters, the
    three special tokens, then filler words up to the size (no merges: text encodes byte by byte, and every id the
    model samples decodes to text). It is the pipeline transformers' ``Qwen2Tokenizer`` rebuilds from a
    checkpoint's vocabulary (a Qwen2 config makes ``AutoTokenizer`` pick that class), so it behaves the same
    whichever class loads it. Chat template: ChatML, as Qwen2's."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    base = byte_chars() + SPECIALS
    if vocab_size < len(base) + 1:
        raise ValueError(f"vocab_size {vocab_size} must be > {len(base)} (bytes and special tokens)")
    vocab = {t: i for i, t in enumerate(base)}
    vocab.update({filler(i): i for i in range(len(base), vocab_size)})
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[], continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False))
    tk.normalizer = normalizers.NFC()
    split = pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False)
    tk.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True) for t in SPECIALS])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>", additional_special_tokens=["<|im_start|>"]
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def make_model(size: str, out_dir: Path, device: str, dtype: str, seed: int) -> int:
    """A randomly initialised ``Qwen2ForCausalLM`` of ``size`` (``SIZES``) saved with its tokenizer to ``out_dir``
    (in ``dtype``), initialised on ``device`` (fast on a GPU). Returns its parameter count."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, inter, layers, heads, kv, vocab = SIZES[size]
    tok = build_tokenizer(vocab)
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=4096,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg)
    # Unit-gain projections (std 1 / sqrt(fan_in)) instead of the 0.02 init: with it the residual stream stays about the
    # input embedding, so a tied-embedding model's greedy output echoes its last prompt token whatever the weights,
    # and the weight-sync check could not tell a synced engine from a stale one. Speed does not depend on the values.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.normal_(0.0, m.in_features**-0.5)
    model = model.to(getattr(torch, dtype))
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    n = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    del model
    free_memory()
    return n


def make_chats(n: int, seed: int) -> list[list[dict[str, str]]]:
    """``n`` fixed chats: one shared system prompt (the engine's shared-prefix cache applies) and a short question."""
    rng = random.Random(seed)
    word = lambda: "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 6)))  # noqa: E731
    system = "You are a careful assistant. Answer in a few words. " + " ".join(word() for _ in range(12))
    return [
        [{"role": "system", "content": system}, {"role": "user", "content": f"What is {word()} and {rng.randint(0, 999)}?"}]
        for _ in range(n)
    ]


def reward(text: str) -> float:
    """The fraction of a completion's words that start with a letter in a..m: in [0, 1], varied across samples."""
    words = text.split()
    return sum(1 for x in words if "a" <= x[0] <= "m") / max(len(words), 1)


def free_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def peak_gpu_mb() -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**20) if torch.cuda.is_available() else None


def step_median(xs: list[float]) -> float | None:
    """The median step, step 0 (warm-up) left out when there are more."""
    return round(statistics.median(xs[1:] if len(xs) > 1 else xs), 3) if xs else None


def ours_phase(args, model_dir: Path, dtype: str, chats, tmp: Path, check_sync: bool) -> dict:
    """Ratchet's persistent GRPO steps (engine generates from the learner's own module, then a train pass), timed;
    with ``check_sync`` the weight-sync check after them."""
    from grpo_parity import grpo_samples, ratchet_grpo

    from ratchet.loop.generation.sampling import SamplingParams
    from ratchet.loop.generation.transformers_backend import TransformersBackend
    from ratchet.loop.train.grpo import GRPOLearner, GRPORun

    free_memory()
    p, g = args.prompts_per_step, args.group_size
    t0 = time.perf_counter()
    engine = TransformersBackend(model_dir, dtype=dtype, batch_size=p * g, device=args.device)
    learner = GRPOLearner(
        model_dir,
        ratchet_grpo(args.lr, p * g, mask_truncated=False, micro_batch_size=args.micro_batch_size),
        ref_dir=model_dir,
        dtype=dtype,
    )
    if not engine.share_module(learner.policy_module()):
        raise RuntimeError("the engine could not share the learner's module; the persistent path would copy weights")
    sync()
    load_s = time.perf_counter() - t0
    prompt_len = max(len(learner.tok(engine.render(c))["input_ids"]) for c in chats)
    run = GRPORun(temperature=0.8, max_completion_length=args.max_new_tokens, max_seq_len=prompt_len + args.max_new_tokens + 8)
    steps, gen, train, tokens = [], [], [], []
    for step in range(args.steps):
        batch = chats[step * p : (step + 1) * p]
        sync()
        t0 = time.perf_counter()
        params = SamplingParams(n=g, temperature=0.8, max_new_tokens=args.max_new_tokens, seed=args.seed + step, logprobs=True)
        comps = engine.generate(batch, params)
        sync()
        gen.append(time.perf_counter() - t0)
        tokens.append(sum(c.completion_tokens for c in comps))
        samples = grpo_samples(comps, batch, [reward(c.text) for c in comps])
        last = step == args.steps - 1  # as a round: at beta = 0 the KL guard's reference pass on the last step only
        learner.train_pass(samples, dataclasses.replace(run, seed=args.seed + step, measure_kl=last, engine_shared=True))
        sync()
        steps.append(time.perf_counter() - t0)
        train.append(steps[-1] - gen[-1])
        print(f"  ours {dtype} step {step}: {steps[-1]:.2f} s (generation {gen[-1]:.2f} s, {tokens[-1]} tokens)", flush=True)
    timed = slice(1, None) if args.steps > 1 else slice(None)
    out = {
        "s_per_step": step_median(steps),
        "gen_s": step_median(gen),
        "train_s": step_median(train),
        "gen_tokens_per_s": round(sum(tokens[timed]) / sum(gen[timed]), 1),
        "step_s": [round(x, 3) for x in steps],
        "load_s": round(load_s, 2),
        "peak_gpu_mb": peak_gpu_mb(),
    }
    if check_sync:
        out["weight_sync"] = weight_sync(args, learner, engine, model_dir, dtype, chats, run, tmp)
    engine.close()
    del engine, learner
    free_memory()
    return out


def weight_sync(args, learner, engine, model_dir: Path, dtype: str, chats, run, tmp: Path) -> dict:
    """The learner's greedy tokens vs an engine loaded from its saved policy and an engine updated in place from its
    state dict (see the module docstring); ``ok`` needs both equal and the in-place engine changed by its update."""
    import torch
    from grpo_parity import grpo_samples

    from ratchet.loop.generation.sampling import SamplingParams
    from ratchet.loop.generation.transformers_backend import TransformersBackend

    p, g = args.prompts_per_step, args.group_size
    comps = engine.generate(chats[:p], SamplingParams(n=g, temperature=0.8, max_new_tokens=args.max_new_tokens, seed=99))
    for group in learner.opt.param_groups:
        group["lr"] = SYNC_LR
    samples = grpo_samples(comps, chats[:p], [reward(c.text) for c in comps])
    learner.train_pass(samples, dataclasses.replace(run, measure_kl=False, engine_shared=True))
    fixed = chats[: min(4, len(chats))]
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=args.max_new_tokens)
    tokens = lambda e: [list(c.token_ids) for c in e.generate(fixed, greedy)]  # noqa: E731
    own = tokens(engine)  # the engine shares the learner's module: the learner's own greedy tokens
    saved_dir = learner.save(tmp / f"synced-{dtype}")
    fresh = TransformersBackend(saved_dir, dtype=dtype, batch_size=p * g, device=args.device)
    from_saved = tokens(fresh)
    fresh.close()
    in_place = TransformersBackend(model_dir, dtype=dtype, batch_size=p * g, device=args.device)
    before = tokens(in_place)
    want = {k: v.detach() for k, v in learner.state_dict().items()}
    seconds, equal = {"shared_module": 0.0}, {}  # a shared module is the learner's own: nothing moves
    for route, source in (("memory", learner.state_dict), ("checkpoint", lambda: saved_dir)):
        if route == "checkpoint":  # back to the base first, so this route's load is what makes the weights equal
            in_place.update_weights(model_dir)
        t0 = time.perf_counter()
        in_place.update_weights(source())
        seconds[route] = round(time.perf_counter() - t0, 4)
        got = in_place.model.state_dict()
        equal[route] = all(torch.equal(got[k].to(v.device), v) for k, v in want.items() if k in got)
    after = tokens(in_place)
    in_place.close()
    res = {"saved_equal": from_saved == own, "in_place_equal": after == own, "before_update_differs": before != own,
           "routes_weights_equal": all(equal.values())}  # fmt: skip
    res["ok"] = all(res.values())
    res["weight_sync_s"], res["route_weights_equal"] = seconds, equal
    res["prompts"], res["tokens_per_prompt"] = len(fixed), args.max_new_tokens
    return res


def trl_phase(args, model_dir: Path, dtype: str, chats, tmp: Path) -> dict:
    """TRL's ``GRPOTrainer`` for ``--steps`` steps on the same model, prompts and settings; step times and peak memory.

    Raises:
        ImportError: TRL or datasets is not installed.
    """
    import torch
    from datasets import Dataset
    from grpo_parity import step_clock, trl_grpo_args
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    free_memory()
    p = args.prompts_per_step
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    tok = AutoTokenizer.from_pretrained(model_dir)
    ds = Dataset.from_list([{"prompt": c} for c in chats[: args.steps * p]])

    def trl_reward(prompts, completions, **_):
        return [reward(c[-1]["content"] if isinstance(c, list) else c) for c in completions]

    times: list[float] = []
    targs = trl_grpo_args(
        tmp / f"trl-{dtype}",
        prompts_per_step=p,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        lr=args.lr,
        steps=args.steps,
        seed=args.seed,
        mask_truncated=False,
        gradient_checkpointing=False,
        cpu=args.device == "cpu",
        bf16=dtype == "bfloat16",
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=trl_reward,
        args=targs,
        train_dataset=ds,
        callbacks=[step_clock(times, sync=sync)],
    )
    trainer.train()
    out = {"s_per_step": step_median(times), "step_s": [round(x, 3) for x in times], "peak_gpu_mb": peak_gpu_mb()}
    del trainer, model
    free_memory()
    return out


def trl_status() -> dict:
    """TRL's version, or why the TRL side cannot run here (its figures are then null)."""
    try:
        import datasets  # noqa: F401 - GRPOTrainer's dataset type
        import trl
    except Exception as e:  # noqa: BLE001 - absent, or carried beside packages it does not fit: the reason is reported
        return {"version": None, "reason": f"TRL side skipped: {type(e).__name__}: {e}"}
    return {"version": trl.__version__, "reason": None}


def check_model(args, size: str, tmp: Path, clock: dict, trl: dict, res: dict, dump) -> None:
    """Every phase on one model size into ``res``, each skipped (with the reason) when the time left cannot hold it;
    ``dump()`` after each phase (the figures so far reach ``--json-out`` even if the run is killed later)."""
    main = "bfloat16" if args.device != "cpu" else "float32"
    other = "float32" if main == "bfloat16" else "bfloat16"
    model_dir = tmp / f"model-{size}"
    t0 = time.perf_counter()
    n = make_model(size, model_dir, args.device, main, args.seed)
    print(f"{size}: {n / 1e6:.0f}M parameters, built and saved in {time.perf_counter() - t0:.1f} s", flush=True)
    chats = make_chats(args.steps * args.prompts_per_step, args.seed)
    res.update(params_m=round(n / 1e6, 1), skipped={}, failed={})
    phases = [
        (f"ours_{main}", lambda: ours_phase(args, model_dir, main, chats, tmp, check_sync=True)),
        ("trl", lambda: trl_phase(args, model_dir, main, chats, tmp)),
        (f"ours_{other}", lambda: ours_phase(args, model_dir, other, chats, tmp, check_sync=False)),
    ]
    for name, run in phases:
        if name == "trl" and trl["reason"]:
            res["trl"], res["skipped"]["trl"] = None, trl["reason"]
            continue
        need = clock["phase_s"].get(name, 0.0) * n / clock.get("params", n)  # the previous model's, scaled
        left = args.budget_s - (time.perf_counter() - clock["start"])
        if need > left:
            res[name], res["skipped"][name] = None, f"budget: ~{need:.0f} s needed, {left:.0f} s left of --budget-s"
            continue
        t1 = time.perf_counter()
        try:
            res[name] = run()
        except Exception as e:  # noqa: BLE001 - recorded in "failed" and the exit status: one run gives every figure it can
            traceback.print_exc()  # on stderr, for whoever reads the log
            res[name], res["failed"][name] = None, f"{type(e).__name__}: {e}"
            free_memory()
        clock["phase_s"][name] = time.perf_counter() - t1
        print(f"{size} {name}: {json.dumps(res[name])}", flush=True)
        dump()
    clock["params"] = n
    ours, trl_res, alt = res.get(f"ours_{main}"), res.get("trl"), res.get(f"ours_{other}")
    res["ratio"] = round(ours["s_per_step"] / trl_res["s_per_step"], 3) if ours and trl_res else None
    bf16, fp32 = (ours, alt) if main == "bfloat16" else (alt, ours)
    res["bf16_vs_fp32"] = round(bf16["s_per_step"] / fp32["s_per_step"], 3) if bf16 and fp32 else None
    res["weight_sync"] = ours.pop("weight_sync") if ours else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda when a GPU is visible")
    ap.add_argument("--tiny", action="store_true", help="the tiny model and a small step (CPU, CI: < 1 min)")
    ap.add_argument("--sizes", default=None, help="comma-separated of tiny,0.5b,1.5b (default 0.5b,1.5b; --tiny: tiny)")
    ap.add_argument("--steps", type=int, default=None, help="timed on-policy steps per phase (default 4; --tiny: 2)")
    ap.add_argument("--prompts-per-step", type=int, default=None, help="default 8 (--tiny: 2)")
    ap.add_argument("--group-size", type=int, default=None, help="completions per prompt, G (default 8; --tiny: 4)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="completion cap, tokens (default 128; --tiny: 16)")
    ap.add_argument("--micro-batch-size", type=int, default=8, help="ours: sequences per forward/backward (grpo's default)")
    ap.add_argument("--lr", type=float, default=1e-5, help="both sides' learning rate for the timed steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=420.0, help="skip phases that would end past this many seconds")
    ap.add_argument(
        "--json-out", type=Path, default=None, help="also write the JSON object to this file (rewritten after every phase)"
    )
    args = ap.parse_args()
    for key, full, tiny in [("sizes", "0.5b,1.5b", "tiny"), ("steps", 4, 2), ("prompts_per_step", 8, 2), ("group_size", 8, 4), ("max_new_tokens", 128, 16)]:  # fmt: skip
        if getattr(args, key) is None:
            setattr(args, key, tiny if args.tiny else full)
    sizes = args.sizes.split(",")
    if bad := [s for s in sizes if s not in SIZES]:
        sys.exit(f"--sizes: unknown size(s) {bad}; valid: {', '.join(SIZES)}")
    if args.steps < 1 or args.group_size < 2:
        sys.exit(f"--steps ({args.steps}) must be >= 1 and --group-size ({args.group_size}) >= 2 (group advantages)")
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch: the learner's Accelerator then picks the CPU too
    for k, v in {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}.items():
        os.environ.setdefault(k, v)
    map_ratchet_namespace()
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()  # the weight loading/writing bars of every phase
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: torch sees no GPU here; run with --device cpu (or on the GPU machine)")
    clock = {"start": time.perf_counter(), "phase_s": {}}
    trl = trl_status()
    out = {
        "device": args.device,
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl,
        "settings": {
            k: getattr(args, k)
            for k in ("steps", "prompts_per_step", "group_size", "max_new_tokens", "micro_batch_size", "lr", "seed")
        },
        "models": {},
    }

    def dump() -> None:
        if args.json_out:
            args.json_out.write_text(json.dumps(out) + "\n")

    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        for size in sizes:
            check_model(args, size, Path(tmp), clock, trl, out["models"].setdefault(size, {}), dump)
    syncs = [m["weight_sync"] for m in out["models"].values()]
    out["weight_sync_ok"] = bool(syncs) and all(s is not None and s["ok"] for s in syncs)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    out["wall_s"] = round(time.perf_counter() - clock["start"], 1)
    dump()
    failed = {f"{size} {k}": v for size, m in out["models"].items() for k, v in m["failed"].items()}
    if failed:
        print(f"gpu_check: {len(failed)} phase(s) failed (tracebacks above): {failed}", file=sys.stderr, flush=True)
    print(json.dumps(out), flush=True)  # the last line, also when a phase failed (the exit status is then 1)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
