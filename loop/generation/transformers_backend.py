"""The transformers generation backend: batched decoding with a shared-prefix KV cache (CPU or one GPU)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ratchet.common.seeds import batch_seed
from ratchet.loop.generation.decoding import decode, onednn_linears, prefill_prefix, register_attention
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
    read_weights,
    render_prompt,
)


class TransformersBackend:
    """Batched decoding with left padding, ``batch_size`` sequences per forward pass, through Ratchet's decode loop
    (``ratchet.loop.generation.decoding``: a preallocated KV cache, finished rows leave the batch, greedy outputs equal
    ``model.generate``'s). Jobs are batched in order of prompt length.

    Sampling is reproducible: batch ``b`` of the (prompt, sample) job list draws from a ``torch.Generator`` seeded with
    ``batch_seed(params.seed, b)`` (``ratchet.common.seeds``), and a shard of the jobs (``jobs=``) runs exactly the batches the whole
    call would run, so shards generated in separate processes merge into the single call's output.
    """

    name = "transformers"

    def __init__(
        self,
        model_path: str | Path,
        *,
        dtype: str = "float32",
        batch_size: int = 64,
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
        if str(device).startswith("cpu") and self.model.config._attn_implementation == "sdpa":
            # grouped-query heads without copies (ratchet.loop.generation.decoding); on GPUs, SDPA's masked GQA falls
            # back to its math kernel, so transformers' own path stays there
            self.model.set_attn_implementation(register_attention())
        self.device = device
        self.batch_size = batch_size
        self.prefix_cache = prefix_cache
        self.shared = False  # True: self.model is a co-located learner's policy (share_module)
        self._packed: dict = {}  # oneDNN copies of the weights (decoding.onednn_linears), cleared by update_weights
        self.eos_ids = eos_ids(self.tokenizer, getattr(self.model.generation_config, "eos_token_id", None))

    def render(self, messages: list[dict[str, str]]) -> str:
        return render_prompt(self.tokenizer, messages)

    def generate(
        self,
        messages: Sequence[PromptInput],
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
        training = self.model.training  # a shared learner's policy is in train mode between its passes
        self.model.eval()
        try:
            # oneDNN-packed weights (decoding.py: 1.6x here); a shared learner's policy changes under us: packed per call
            with onednn_linears(self.model, None if self.shared else self._packed):
                return self._generate(messages, params, progress, jobs)
        finally:
            self.model.train(training)

    def _generate(self, messages, params: SamplingParams, progress: ProgressFn | None, jobs: range | None) -> list[Completion]:
        torch = self.torch
        ids = prompt_token_ids(self.tokenizer, messages)
        plen = _shared_prefix_len(ids) if self.prefix_cache else 0
        prefix = prefill_prefix(self.model, ids[0][:plen], self.device) if plen >= 8 else None
        plen = plen if prefix else 0
        # Jobs sorted by prompt length (stable), so a batch's rows need little padding; batch b is the same rows in a
        # whole call and in the shard that holds it.
        order = sorted(range(len(messages)), key=lambda i: len(ids[i]))
        all_jobs = [(i, s) for i in order for s in range(params.n)]
        sel = check_jobs(jobs, len(all_jobs), self.batch_size)
        processors = _sampling_processors(params)
        stopping = None
        if params.stop:  # sampling ends at a stop string (transformers' StopStringCriteria); cut by make_completion
            from transformers import StopStringCriteria

            stopping = StopStringCriteria(self.tokenizer, list(params.stop))
        out: list[Completion] = []
        for b, start in enumerate(range(0, len(all_jobs), self.batch_size)):
            if start not in sel:
                continue
            chunk = all_jobs[start : start + self.batch_size]
            input_ids, mask = self._layout([ids[i] for i, _ in chunk], plen)  # (B, P + S) int64 each
            generator = torch.Generator(device=self.device).manual_seed(batch_seed(params.seed, b))
            rows = decode(self.model, input_ids, mask, max_new_tokens=params.max_new_tokens, eos_ids=self.eos_ids,
                          prefix=prefix, processors=processors, do_sample=params.temperature > 0, generator=generator,
                          stopping=stopping, logprobs=params.logprobs)  # fmt: skip
            for (pi, si), row in zip(chunk, rows):
                out.append(
                    make_completion(self.tokenizer, self.eos_ids, pi, si, row.token_ids, ids[pi], row.logprobs, params.stop)
                )
            if progress:
                progress(min(start + self.batch_size, sel.stop) - sel.start, len(sel))
        return sorted(out, key=lambda c: (c.prompt_index, c.sample_index))

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

    def share_module(self, model) -> bool:
        """Generate from ``model`` itself from now on: the co-located learner's policy, whose parameters its
        optimizer updates in place, so a new policy reaches the engine with no copy (and one copy of the weights
        is held, not two). Generation runs it in eval mode and restores its mode after.

        Returns:
            True when shared; False (nothing changed) when ``model`` is not the same architecture with the same
            parameter names, shapes, dtype and device as the loaded one.
        """
        mine = {n: (tuple(p.shape), p.dtype, p.device) for n, p in self.model.named_parameters()}
        theirs = {n: (tuple(p.shape), p.dtype, p.device) for n, p in model.named_parameters()}
        if type(model) is not type(self.model) or mine != theirs:
            return False
        self.model, self.shared = model, True
        self._packed.clear()
        return True

    def update_weights(self, weights: Weights | str | Path) -> None:
        """Load new policy weights into the loaded model in place (the same module object; dtype and device kept).

        Args:
            weights: a state dict (Hugging Face parameter names -> tensors), or a checkpoint directory / safetensors
                file. Weights tied to a loaded tensor (e.g. ``lm_head`` tied to the embeddings) may be absent.

        Raises:
            ValueError: a name the model does not have, or a missing weight that is not tied to a given one
                (the message lists a few); or the engine shares a learner's module (``share_module``), whose
                weights are the learner's to change.
        """
        torch = self.torch
        if self.shared:
            raise ValueError("update_weights: the engine generates from the co-located learner's policy; train it instead")
        state = read_weights(weights) if isinstance(weights, str | Path) else dict(weights)
        self._packed.clear()  # the packed copies are of the old weights
        with torch.no_grad():
            missing, unexpected = self.model.load_state_dict(state, strict=False)
        given = {p.data_ptr() for n, p in self.model.named_parameters(remove_duplicate=False) if n in state}
        untied = [n for n, p in self.model.named_parameters(remove_duplicate=False) if n in missing and p.data_ptr() not in given]
        if unexpected or untied:
            raise ValueError(
                f"update_weights: weights do not match the loaded model (unknown: {sorted(unexpected)[:3]}, missing: "
                f"{sorted(untied)[:3]}); pass a checkpoint of the same architecture"
            )

    def close(self) -> None:
        self._packed.clear()
        del self.model


def _sampling_processors(params: SamplingParams):
    """The logits processors that turn the model's logits into the sampling distribution, in transformers' own
    order (temperature, then top-p: ``GenerationMixin._get_logits_processor``)."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

    procs = LogitsProcessorList()
    if params.temperature > 0 and params.temperature != 1.0:
        procs.append(TemperatureLogitsWarper(params.temperature))
    if params.temperature > 0 and params.top_p < 1.0:
        procs.append(TopPLogitsWarper(top_p=params.top_p, min_tokens_to_keep=1))
    return procs


def _shared_prefix_len(rows: list[list[int]]) -> int:
    """Length of the token prefix all rows share, leaving every row at least one token of its own."""
    n = min(len(r) for r in rows) - 1
    for k in range(max(n, 0)):
        t = rows[0][k]
        if any(r[k] != t for r in rows):
            return k
    return max(n, 0)
