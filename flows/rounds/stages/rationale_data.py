"""The training rows of an rft round's rationalizations (``sft.rationalization``; the stage: ``rationalize``)."""

from __future__ import annotations

import json

from ratchet.loop.campaign.round_context import Ctx
from ratchet.loop.tasks.sources import Prompt
from ratchet.store.queries import training_set

PURPOSE = "rationalization"


def uses_rationalization(ctx: Ctx) -> bool:
    """Whether the round has a rationalize stage: an rft round with ``sft.rationalization``."""
    return ctx.cfg.algorithm == "rft" and ctx.cfg.sft.rationalization


def rationalized_examples(con, ctx: Ctx) -> list[dict]:
    """The round's verified-correct rationalizations as training rows (origin ``rationalization``), each under its
    prompt as the round renders it without the hint (never the stored hinted chat)."""
    if not uses_rationalization(ctx):
        return []
    rows = training_set(con, ctx.round_id, ctx.verifier_version, ctx.cfg.sft.max_per_prompt, purpose=PURPOSE)
    out = []
    for r in rows:
        plain = Prompt(r["prompt_id"], r.get("source") or "", "", r["question"], "", "train")
        out.append({**r, "prompt_messages": json.dumps(ctx.messages(plain)), "prompt_ids_hash": None, "origin": PURPOSE})
    return out
