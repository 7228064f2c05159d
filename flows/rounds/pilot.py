"""The pilot ``ratchet run`` samples before a campaign's first round (``[preflight] pilot``).

A few of round 1's train prompts, ``group_size`` samples each, from the model that will generate (the base, or
``generation.teacher``), through the same device pool as a round's generate stage and at its sampling settings,
with a longer cap (``ratchet.loop.train.pilot.probe_cap``); verified at the round's cap. Nothing is written to
the store or the run dir (the pool's shard files go to a temporary folder).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from ratchet.common.seeds import derive_seed
from ratchet.flows.compute import pool
from ratchet.flows.rounds.curriculum_setup import stage_contexts
from ratchet.flows.rounds.stages import prompt_rows
from ratchet.loop.checkpoints import resolve_model
from ratchet.loop.config import RatchetConfig
from ratchet.loop.evaluation.scoring import score_items
from ratchet.loop.generation.base import Completion, SamplingParams
from ratchet.loop.train.lengths import round_max_new_tokens
from ratchet.loop.train.pilot import PilotResult, cut_at, probe_cap

logger = logging.getLogger(__name__)


def run_pilot(cfg: RatchetConfig) -> PilotResult | None:
    """Sample and score the pilot of ``cfg``'s first round; None when that round samples nothing (a cold-start sft
    stage trains on reference solutions).

    Raises:
        StageTimeout, WorkerFailed: as a round's generate stage (``ratchet.flows.compute.pool.generate``).
    """
    ctx = stage_contexts(cfg)[0]
    if ctx.cfg.algorithm == "sft":
        return None
    g = ctx.cfg.generation
    prompts = ctx.train_prompts()[: cfg.preflight.pilot_prompts]
    cap = round_max_new_tokens(ctx.cfg, None)  # round 1's cap ('auto': its minimum)
    probe = probe_cap(cap)
    model = resolve_model(g.teacher or ctx.cfg.model.name_or_path)
    comps: list[Completion] = []
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="ratchet-pilot-") as tmp:
        for G, subset in sorted(ctx.tasks.group_sizes(prompts, g.group_size).items()):
            params = SamplingParams(
                n=G,
                temperature=ctx.cfg.rollout_temperature,
                top_p=g.top_p,
                max_new_tokens=probe,
                seed=derive_seed("rollouts", g.seed, 1, 0),  # round 1's rollout seed
            )
            got = pool.generate(
                model,
                [ctx.messages(p) for p in subset],
                [pool.GenCall("pilot", params)],
                Path(tmp) / f"g{G}",
                gen=g,
                compute=ctx.cfg.compute,
                dtype=ctx.cfg.model.dtype,
                stage="pilot",
                log=logger,
            )["pilot"]
            comps += got
            rows += [prompt_rows([subset[c.prompt_index]])[0] for c in got]
    texts = _texts_at(model, comps, cap)
    verdicts = [vd for _, vd in score_items(texts, rows, ctx.reward)]
    return PilotResult(
        prompts=len(prompts),
        completions=comps,
        texts=texts,
        correct=[vd.correct for vd in verdicts],
        reasons=[vd.reason for vd in verdicts],
        cap=cap,
        probe=probe,
        algorithm=ctx.cfg.algorithm,
        auto=g.max_new_tokens == "auto",
    )


def _texts_at(model: Path, comps: list[Completion], cap: int) -> list[str]:
    """Each completion's text as the round, sampling with ``cap`` tokens, would have verified it: a cut one decoded
    from its first ``cap`` token ids."""
    if not any(cut_at(c, cap) for c in comps):
        return [c.text for c in comps]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    return [tok.decode(list(c.token_ids[:cap]), skip_special_tokens=True) if cut_at(c, cap) else c.text for c in comps]
