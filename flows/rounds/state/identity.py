"""Campaign identity: whether a config continues the campaign the store holds under its name.

A campaign's identity is the settings ``RatchetConfig.campaign_settings`` lists (not the gate, schedule or service
sections); a config that differs from the stored one is refused before any work, except in settings
``ratchet campaign resume --set`` changed, and except a key only one side has (a newer Ratchet adds keys with defaults).
"""

from __future__ import annotations

import itertools
from pathlib import Path

from ratchet.flows.compute.resolve import verified_checkpoint_dir
from ratchet.loop.campaign.round_context import Ctx, campaign_id_of
from ratchet.loop.checkpoints import ModelError
from ratchet.loop.config import RatchetConfig
from ratchet.store.db import connect, require_store
from ratchet.store.events import recorded_settings
from ratchet.store.queries import campaign_by_name, campaign_ids, campaign_state, promoted_before


class CampaignConflict(ValueError):
    """A campaign of that name exists in the store with different settings."""


def settings_diff(new: dict, old: dict) -> list[str]:
    """Keys whose value differs. A key only one side has is no conflict: a newer Ratchet adds keys with
    defaults, and an unused trainer section is left out; inside a section the same holds per key."""
    out = []
    for k, v in new.items():
        if k not in old:
            continue
        if isinstance(v, dict) and isinstance(old[k], dict):
            out += [f"{k}.{sub}" for sub in settings_diff(v, old[k])]
        elif v != old[k] and not (v in ([], ()) and old[k] is None):
            out.append(k)
    return sorted(out)


def dotted(settings: dict, key: str) -> object:
    """``settings["a"]["b"]`` for the key ``"a.b"``; None where a part is missing."""
    for part in key.split("."):
        settings = settings.get(part) if isinstance(settings, dict) else None
    return settings


def check_checkpoints(con, ctx: Ctx) -> None:
    """Refuse, before any work, a continued campaign whose base or incumbent checkpoint's files no longer hash to the
    id the store recorded (a corrupted or edited folder), instead of failing inside the round with a stray row.

    Raises:
        ModelError: the folder changed or is gone (the message names the checkpoint and the fix).
    """
    if campaign_by_name(con, ctx.cfg.campaign) is None:
        return
    state = campaign_state(con, ctx.campaign_id, ctx.eval_set_id())
    for ckpt in dict.fromkeys((state.base_checkpoint_id, state.incumbent_checkpoint_id)):
        try:
            verified_checkpoint_dir(con, ckpt)
        except LookupError as e:
            raise ModelError(f"campaign {ctx.cfg.campaign!r}: {e}") from None


def check_same_settings(con, cfg: RatchetConfig) -> None:
    """Refuse a config that differs from the stored campaign's except in settings a resume changed (to their new value)."""
    existing = campaign_by_name(con, cfg.campaign)
    if existing is None:
        return
    legacy_jsonl_conflict(con, cfg, existing)
    settings = cfg.campaign_settings()
    changed = recorded_settings(con, existing["campaign_id"])
    diff = [k for k in settings_diff(settings, existing["config"]) if not (k in changed and dotted(settings, k) == changed[k])]
    if diff:
        sql = "SELECT count(*) FROM rounds WHERE campaign_id = ? AND status = 'completed'"
        never = con.execute(sql, [existing["campaign_id"]]).fetchone()[0] == 0
        raise CampaignConflict(
            f"campaign {cfg.campaign!r} already exists in {cfg.db} with different settings ({', '.join(diff)}); "
            + (
                "it never completed a round: `ratchet run --reset` drops it and starts over with these settings; or use "
                if never
                else "use "
            )
            + "--campaign NEW_NAME, the original settings to continue it, or "
            "`ratchet campaign resume NAME --reason ... --set KEY=VALUE` to change a setting from the next round on"
        )


def legacy_jsonl_conflict(con, cfg: RatchetConfig, existing: dict) -> None:
    """Refuse to continue a campaign recorded with the old ``tasks.source = "jsonl"``, saying how to go on.

    Its prompts were rendered with ``tasks.system_prompt`` and no worked examples, under prompt ids of the source
    ``jsonl:<file name>``; the fold into ``[[tasks.sources]]`` (``ratchet.loop.config.tasks.fold_jsonl_source``)
    renders and names them as a ``[[tasks.sources]]`` entry does, so the campaign's training prompts, held-out set
    and eval set id would all change under it. Its store rows stay as they are; a new campaign name trains on from
    the old campaign's last promoted checkpoint (the message names its folder).

    Raises:
        CampaignConflict: the stored campaign has ``tasks.source = "jsonl"``.
    """
    tasks = (existing.get("config") or {}).get("tasks") or {}
    if tasks.get("source") != "jsonl":
        return
    last = promoted_before(con, existing["campaign_id"])[-1]
    row = con.execute("SELECT path FROM checkpoints WHERE checkpoint_id = ?", [last]).fetchone()
    raise CampaignConflict(
        f"campaign {cfg.campaign!r} in {cfg.db} was recorded with tasks.source = 'jsonl' (the arithmetic-style system "
        "prompt, no worked examples, prompt ids of source 'jsonl:<file name>'), which Ratchet now reads as a "
        "[[tasks.sources]] entry with the math format's prompt, so its prompts and held-out set would change: continue "
        f"with --campaign {cfg.campaign}-v2 and model.name_or_path = {row[0] if row else last!r} (its last promoted "
        "checkpoint; the old campaign's rows stay in the store)"
    )


MAX_EPOCHS = 10_000  # resets of one name; only bounds the search for a stored id


def with_campaign_epoch(cfg: RatchetConfig) -> RatchetConfig:
    """``cfg`` with the ``campaign_epoch`` its store holds for the name: the stored start's, else the first whose
    id no retired start took (0 in a new store)."""
    if not Path(cfg.db).exists():
        return cfg.model_copy(update={"campaign_epoch": 0})
    with connect(cfg.db, read_only=True) as con:
        require_store(con, Path(cfg.db))
        stored, taken = campaign_by_name(con, cfg.campaign), campaign_ids(con)
    if stored is not None:
        epoch = next((k for k in range(MAX_EPOCHS) if campaign_id_of(cfg.campaign, k) == stored["campaign_id"]), 0)
    else:
        epoch = next(k for k in itertools.count() if campaign_id_of(cfg.campaign, k) not in taken)
    return cfg.model_copy(update={"campaign_epoch": epoch})
