"""The round's training pass as it runs inside the training worker process (``ratchet.flows.compute.worker``).

Rejection-sampling fine-tuning (``algorithm = "rft"``) or a GRPO-family pass (``"grpo"``) from the
stage's filtered examples. The parent resolved everything the pass needs from the store (checkpoint
folders, the rollout cap; ``ratchet.flows.compute.resolve``): the worker opens neither the store nor
Prefect (import contracts in pyproject.toml).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from ratchet.common.seeds import derive_seed
from ratchet.loop.campaign.round_context import Ctx
from ratchet.loop.tasks.sources import Prompt
from ratchet.loop.train.examples import ChatExample
from ratchet.loop.train.grpo import GRPORun, GRPOSample, train_grpo
from ratchet.loop.train.sft import train_sft

logger = logging.getLogger(__name__)


def train_compute(
    ctx: Ctx,
    init_dir: Path,
    ref_dir: Path | None,
    examples: list[dict],
    out: Path,
    progress,
    *,
    max_completion_length: int,
) -> tuple[Path | None, dict, list[str]]:
    """The round's training pass into ``out``: (saved checkpoint dir or None, metrics, consumed trajectory ids).

    Runs inside the training worker process (``python -m ratchet.flows.compute.worker train``, started by the train
    stage via ``ratchet.flows.compute.pool``). ``init_dir``/``ref_dir`` are verified checkpoint folders (the policy to
    start from, GRPO's reference); ``max_completion_length`` is the round's rollout cap in tokens.
    """
    if ctx.cfg.algorithm != "grpo":  # rft, or sft on reference solutions (a cold start)
        return _train_rft(ctx, init_dir, examples, out, progress)
    return _train_grpo(ctx, init_dir, ref_dir, examples, out, progress, max_completion_length)


def _train_rft(ctx: Ctx, init_dir: Path, examples: list[dict], out: Path, progress) -> tuple[Path, dict, list[str]]:
    sft = ctx.cfg.sft
    chats = stored_chats(ctx, examples)
    res = train_sft(
        init_dir,
        [
            ChatExample(
                chat,
                e["completion"],
                _ids(e.get("completion_token_ids")),  # None: a reference solution, or a row of an older store
            )
            for e, chat in zip(examples, chats, strict=True)
        ],
        out,
        sft,
        seed=derive_seed("sft", sft.seed, ctx.round_index),
        dtype=ctx.cfg.model.dtype,
        on_step=lambda s, n, _loss: progress(s, n),
    )
    return res.checkpoint_dir, res.metrics, [e["trajectory_id"] for e in examples]


def grpo_inputs(ctx: Ctx, rows: list[dict], max_completion_length: int) -> tuple[list[GRPOSample], GRPORun]:
    """A step's filtered groups (``rows`` of ``rollout_groups``) as learner samples, and the pass's run settings
    (the step's seed, the round's rollout cap in tokens; the KL guard measured on the round's last step): the same
    for a per-step training process and a persistent round's learner."""
    gen = ctx.cfg.generation
    group_of = {pid: i for i, pid in enumerate(dict.fromkeys(r["prompt_id"] for r in rows))}
    chats = stored_chats(ctx, rows)
    samples = [
        GRPOSample(
            group_of[r["prompt_id"]],
            ChatExample(chat, r["completion"], _ids(r.get("completion_token_ids"))),
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
    return samples, run


def _train_grpo(
    ctx: Ctx, init_dir: Path, ref_dir: Path, rows: list[dict], out: Path, progress, max_completion_length: int
) -> tuple[Path | None, dict, list[str]]:
    g = ctx.cfg.grpo
    samples, run = grpo_inputs(ctx, rows, max_completion_length)
    # The on-policy steps of one round continue one AdamW: this step starts from the moments the last
    # step that trained left behind (copied, so a re-run of this step starts from the same state).
    opt_state = ctx.stage_dir("train") / "optimizer.pt"
    opt_state.parent.mkdir(parents=True, exist_ok=True)
    prev = [p for p in (ctx.at_step(s).stage_dir("train") / "optimizer.pt" for s in range(ctx.step - 1, -1, -1)) if p.is_file()]
    if prev:
        shutil.copyfile(prev[0], opt_state)
    else:
        opt_state.unlink(missing_ok=True)
    res = train_grpo(
        init_dir,
        samples,
        out,
        g,
        run,
        ref_dir=ref_dir,
        dtype=ctx.cfg.model.dtype,
        on_step=lambda s, n, _m: progress(s, n),
        optimizer_state=opt_state,
    )
    metrics = {**res.metrics, "steps": res.step_metrics}
    return res.checkpoint_dir, metrics, [rows[i]["trajectory_id"] for i in res.kept]


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
