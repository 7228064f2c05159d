"""A step's filtered rows as the engine's learner request: a rejection-sampling fine-tuning pass (``algorithm = "rft"``,
``sft_step``) or a GRPO-family pass (``"grpo"``, ``grpo_step``).

The parent resolved everything the pass needs from the store (checkpoint folders, the rollout cap;
``ratchet.flows.compute.resolve``); the request carries it to the engine's ranks, which open neither the store nor
Prefect (import contracts in pyproject.toml).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ratchet.common.seeds import derive_seed
from ratchet.flows.compute.messages import GRPOStep, SFTStep
from ratchet.loop.campaign.round_context import Ctx
from ratchet.loop.tasks.sources import Prompt
from ratchet.loop.train.examples import ChatExample
from ratchet.loop.train.grpo import GRPORun, GRPOSample

logger = logging.getLogger(__name__)


def sft_step(ctx: Ctx, init_dir: Path, examples: list[dict], out: Path) -> SFTStep:
    """A step's filtered examples as the engine's rejection-sampling fine-tuning pass from ``init_dir`` into ``out``
    (the round's seed; each example trains on its sampled ids where stored)."""
    sft = ctx.cfg.sft
    chats = stored_chats(ctx, examples)
    return SFTStep(
        str(init_dir),
        [
            # ids None: a reference solution; read_chars: train only on what the verifier read
            ChatExample(
                chat, e["completion"], _ids(e.get("completion_token_ids")), e.get("read_chars"), _ids(e.get("completion_mask"))
            )
            for e, chat in zip(examples, chats, strict=True)
        ],
        str(out),
        sft.model_dump(mode="json"),
        derive_seed("sft", sft.seed, ctx.round_index),
        ctx.cfg.model.dtype,
    )


def grpo_step(ctx: Ctx, rows: list[dict], max_completion_length: int) -> GRPOStep:
    """A step's filtered groups (``rows`` of ``rollout_groups``) as the engine's learner pass: the samples and the
    pass's run settings (the step's seed, the round's rollout cap in tokens; the KL guard measured on the round's
    last step)."""
    gen = ctx.cfg.generation
    group_of = {pid: i for i, pid in enumerate(dict.fromkeys(r["prompt_id"] for r in rows))}
    chats = stored_chats(ctx, rows)
    samples = [
        GRPOSample(
            group_of[r["prompt_id"]],
            ChatExample(
                chat, r["completion"], _ids(r.get("completion_token_ids")), r.get("read_chars"), _ids(r.get("completion_mask"))
            ),
            float(r["reward"]),
            r["finish_reason"] == "length",
            sampler_logprobs=None if r.get("sampler_logprobs") is None else tuple(map(float, r["sampler_logprobs"])),
            prompt_hash=r.get("prompt_ids_hash"),
        )
        for r, chat in zip(rows, chats, strict=True)
    ]
    run = GRPORun(
        temperature=ctx.cfg.rollout_temperature,
        max_completion_length=max_completion_length,
        max_seq_len=ctx.cfg.sft.max_seq_len,
        top_p=gen.top_p,
        seed=derive_seed("grpo", gen.seed, ctx.round_index, ctx.step),
        measure_kl=ctx.step == ctx.steps - 1,  # the KL guard judges the candidate; with beta > 0 every step evaluates it
    )
    return GRPOStep(samples, run)


def stored_chats(ctx: Ctx, rows: list[dict]) -> list[list[dict[str, str]]]:
    """The chat each training row was generated from, as stored with it: a general record's own turns
    (``messages_json``), else the trajectory's ``prompt_messages``; a reference solution (never sampled) takes its
    prompt as the round renders it. Rollouts of a store from before chats were stored are re-rendered from the
    round's settings too, counted and logged once (their prompt may differ from what was sampled)."""
    out, rerendered = [], 0
    for r in rows:
        stored = r.get("messages_json") or r.get("prompt_messages")
        if stored:
            out.append(json.loads(stored))
            continue
        out.append(ctx.messages(_as_prompt(r)))
        rerendered += r.get("origin") in (None, "rollout")
    if rerendered:
        logger.warning(
            "%d of %d training rollouts have no stored chat (rows of a store from before chats were stored): their "
            "prompt was re-rendered from the round's settings",
            rerendered,
            len(rows),
        )
    return out


def _ids(ids) -> tuple[int, ...] | None:
    return None if ids is None else tuple(int(t) for t in ids)


def _as_prompt(e: dict) -> Prompt:
    return Prompt(e["prompt_id"], e.get("source") or "", "", e["question"], "", "train")  # source: its chat template
