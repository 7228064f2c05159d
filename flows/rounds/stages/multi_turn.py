"""Sampling a stage's prompts on the round's engine: single-turn prompts in one call, environment sources as episodes.

Prompts of a source with an ``environment`` run as multi-turn episodes (``ratchet.loop.environments.run_episodes``:
one engine call per turn across episodes). Rollouts (RFT and GRPO) and the held-out evaluation both sample here, so the gate evaluates episodes with
the same environment the round trained on.
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from pathlib import Path

from ratchet.flows.compute.engine import RoundEngine
from ratchet.flows.compute.resolve import checkpoint_path
from ratchet.flows.rounds.stages.round_engine import sample
from ratchet.loop.campaign.round_context import Ctx
from ratchet.loop.config.tasks import TaskSourceConfig
from ratchet.loop.environments import (
    EnvironmentRef,
    EpisodeSpec,
    load_environment,
    prompt_record,
    sample_mixed,
)
from ratchet.loop.generation.sampling import Completion, SamplingParams
from ratchet.loop.tasks.sources import Prompt
from ratchet.store.db import connect
from ratchet.store.queries import campaign_state


def environment_sources(ctx: Ctx) -> dict[str, TaskSourceConfig]:
    """The task sources (the round's and the campaign's evaluation sources) that name an ``environment``, by name."""
    out: dict[str, TaskSourceConfig] = {}
    for cfg in (ctx.eval_cfg, ctx.cfg):
        out |= {s.source_name(): s for s in cfg.tasks.sources if s.environment}
    return out


@lru_cache(maxsize=4)
def _tokenizer(model_dir: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def source_environment(src: TaskSourceConfig) -> EnvironmentRef:
    """A source's environment, imported from its ``plugin_dir`` (the config file's folder) or its task file's first
    (loaded on each use, not cached: ``load_plugin`` imports an edited module again, and the identity follows it)."""
    return load_environment(src.environment, src.plugin_dir or (str(Path(src.path).parent) if src.path else None))


def _model_dir(ctx: Ctx, checkpoint_id: str) -> Path:
    """A saved folder holding the tokenizer of ``checkpoint_id``: its own, or (a GRPO step's policy, never saved) the
    campaign's base checkpoint's, whose tokenizer every policy of the campaign keeps."""
    try:
        return checkpoint_path(ctx, checkpoint_id)
    except LookupError:
        with connect(ctx.db, read_only=True) as con:
            base = campaign_state(con, ctx.campaign_id, ctx.eval_set_id()).base_checkpoint_id
        return checkpoint_path(ctx, base)


def sample_prompts(
    ctx: Ctx, engine: RoundEngine, checkpoint_id: str, prompts: list[Prompt], params: SamplingParams, desc: str
) -> list[Completion]:
    """``params.n`` completions (or episodes) per prompt from ``checkpoint_id``, in (prompt index, sample index) order.

    A prompt whose source names an ``environment`` runs as episodes of at most the source's ``max_turns`` assistant
    turns (its environment imported from the source's ``plugin_dir`` or task file's folder first, then the ``PYTHONPATH``
    and the installed packages); the others are sampled as ``round_engine.sample`` does.

    Raises:
        PluginError: a source's environment cannot be loaded. EnvironmentMessageError: an environment returned a
            malformed message.
    """
    envs = environment_sources(ctx)
    chats = [ctx.messages(p) for p in prompts]
    if not any(p.source in envs for p in prompts):
        return sample(ctx, engine, checkpoint_id, chats, params, desc)
    refs = {name: source_environment(src) for name, src in envs.items() if any(p.source == name for p in prompts)}
    specs = [
        EpisodeSpec(refs[p.source].make, prompt_record(p), chat, envs[p.source].max_turns, refs[p.source].name)
        if p.source in envs
        else None
        for p, chat in zip(prompts, chats)
    ]
    calls = itertools.count(1)  # the single-turn prompts' call, then one per turn: each its own progress bar
    gen = lambda batch, p: sample(ctx, engine, checkpoint_id, batch, p, f"{desc}, call {next(calls)}")
    tok = _tokenizer(str(_model_dir(ctx, checkpoint_id)))
    return sample_mixed(gen, tok, chats, specs, params, max_tokens=episode_token_bound(ctx.cfg))


def episode_token_bound(cfg) -> int:
    """Tokens an episode may reach, prompt included: it fits the trainer's sequence (``sft.max_seq_len``) and the
    engine's context (``generation.max_model_len``)."""
    return min(cfg.sft.max_seq_len, cfg.generation.max_model_len or cfg.sft.max_seq_len)
