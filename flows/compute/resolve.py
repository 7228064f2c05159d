"""What a stage resolves from the store before its compute starts: a checkpoint's verified folder, the round's
rollout cap. The parent passes the results (paths and numbers) to worker processes, which never open the store."""

from __future__ import annotations

from pathlib import Path

from ratchet.loop.campaign.round_context import Ctx
from ratchet.loop.checkpoints import verify_checkpoint
from ratchet.loop.train.lengths import round_max_new_tokens
from ratchet.store.db import connect
from ratchet.store.queries import checkpoint_dir, last_rollout_p90


def checkpoint_path(ctx: Ctx, checkpoint_id: str) -> Path:
    """The verified folder of a saved checkpoint.

    Raises:
        LookupError: not in the store, or never saved (``ratchet.store.queries.checkpoint_dir``).
    """
    with connect(ctx.db, read_only=True) as con:
        return verified_checkpoint_dir(con, checkpoint_id)


def verified_checkpoint_dir(con, checkpoint_id: str) -> Path:
    """``checkpoint_path`` on an open store connection: the folder, checked to hash to the recorded id.

    Raises:
        LookupError: not in the store, or never saved.
        ModelError: the folder's files changed since the id was recorded, or it is gone.
    """
    return verify_checkpoint(checkpoint_dir(con, checkpoint_id), checkpoint_id)  # the files a round loads are the id's


def rollout_cap(ctx: Ctx) -> int:
    """This round's rollout completion cap, tokens: ``generation.max_new_tokens``, or under 'auto' 1.2 x the P90
    of the campaign's last round's rollout lengths within [max_new_tokens_min, max_new_tokens_max]."""
    if isinstance(ctx.cfg.generation.max_new_tokens, int):
        return ctx.cfg.generation.max_new_tokens
    with connect(ctx.db, read_only=True) as con:
        p90 = last_rollout_p90(con, ctx.campaign_id, ctx.round_index)
    return round_max_new_tokens(ctx.cfg, p90)
