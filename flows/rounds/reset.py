"""A campaign name's start in the store (``campaign_epoch``) and ``ratchet run --reset``, which retires a start that
never completed a round so that an edited config can start the name afresh.

Rows are never deleted (the reader catalog publishes the big tables append-only): a reset renames the old start's
campaign row to ``<name>~reset-<epoch>`` and the name's next start gets other ids (``campaign_id_of(name, epoch)``),
so none of its trajectories, verdicts or evaluations can collide with the old start's. The old start's run dir
(stage markers a resumed round would reuse) is removed.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable

from ratchet.flows.rounds.campaign import stored_rounds
from ratchet.flows.rounds.state.identity import CampaignConflict
from ratchet.loop.campaign.round_context import Ctx, now
from ratchet.loop.config import RatchetConfig
from ratchet.store.db import connect, transaction
from ratchet.store.queries import campaign_by_name, retire_campaign, running_rounds


def reset_campaign(cfg: RatchetConfig, alive: Callable[[str | None], bool]) -> str | None:
    """Retire ``cfg``'s campaign start when it never completed a round; returns a line saying what was done (None: the
    store holds no such campaign). ``cfg`` carries the stored epoch (``with_campaign_epoch``); ``alive(owner)`` says
    whether a round's ``'host:pid'`` owner still runs.

    Raises:
        CampaignConflict: the campaign completed a round (a reset would throw its history away), or one of its
            rounds is running in a live process.
    """
    done = stored_rounds(cfg)
    if done:
        raise CampaignConflict(
            f"campaign {cfg.campaign!r} has {done} completed round(s); --reset drops only a campaign that never "
            "completed one; use --campaign NEW_NAME for a new one, or `ratchet campaign resume` to change its settings"
        )
    with connect(cfg.db, read_only=True) as con:
        if campaign_by_name(con, cfg.campaign) is None:
            return None
        live = [r for r in running_rounds(con) if r["campaign"] == cfg.campaign and alive(r["owner"])]
        taken = {r[0] for r in con.execute("SELECT name FROM campaigns").fetchall()}
    if live:
        raise CampaignConflict(
            f"round {live[0]['round_index']} of campaign {cfg.campaign!r} is running ({live[0]['owner']}); stop it first"
        )
    ctx = Ctx(cfg)
    retired = next(n for k in itertools.count(cfg.campaign_epoch) if (n := f"{cfg.campaign}~reset-{k}") not in taken)
    with transaction(cfg.db) as con:
        retire_campaign(con, ctx.campaign_id, retired, now())
    shutil.rmtree(ctx.campaign_dir, ignore_errors=True)  # its stage markers and saved config: the new start's are its own
    return (
        f"reset: campaign {cfg.campaign!r} had no completed round; its start is kept in the store as {retired!r} and "
        f"its run dir {ctx.campaign_dir} was removed"
    )
