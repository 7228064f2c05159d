"""``ratchet reverify``: re-score stored trajectories with the current verifier version.

New verdict rows are added next to the old ones (never overwritten), so a verifier change is
auditable in SQL: join the two versions on ``trajectory_id`` to see every flip.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from ratchet.loop.campaign.context import now, short_hash
from ratchet.loop.evaluation.scoring import reward_spec, score_items, verdict_row
from ratchet.store.db import connect, init_db, require_store, transaction
from ratchet.store.ingest import ingest_parquet, write_parquet
from ratchet.store.queries import trajectories_to_reverify
from ratchet.verifiers.reward import VERSION

# Verdict names: the outcome verifier (math, code); 'composite' in stores written before task formats.
VERIFIERS = ["math", "code", "composite"]


def reverify(db: str | Path, *, run_dir: str | Path | None = None) -> dict:
    """Score every trajectory lacking a verdict of the current composite verifier version.

    The new verdicts are written as Parquet under ``run_dir`` (the campaign config's ``run_dir``;
    default ``<db without suffix>.runs``) before they are ingested.

    Returns:
        ``{"version", "rescored", "flips": {"wrong->right", "right->wrong", "unchanged", "new"}, "inserted"}``.
    Raises:
        StoreError: the store cannot be opened or is not a Ratchet store.
    """
    db = Path(db)
    if db.is_file():
        init_db(db)  # a store written before task formats gains the prompt columns the query reads (refuses a foreign file)
    with connect(db, read_only=True) as con:
        require_store(con, db)
        todo = trajectories_to_reverify(con, VERIFIERS, VERSION)
    flips: Counter[str] = Counter()
    rows: list[dict] = []
    by_config: dict[str, list[dict]] = {}
    for t in todo:
        by_config.setdefault(t["config_json"], []).append(t)
    for config_json, items in by_config.items():
        config = json.loads(config_json)
        spec = reward_spec(config.get("verifier", {}), (config.get("tasks") or {}).get("sources") or ())
        scored = score_items([t["completion"] for t in items], items, spec)
        ts = now()
        for t, (kind, vd) in zip(items, scored):
            prev = t["prev_correct"]
            flips[
                "new" if prev is None else "unchanged" if prev == vd.correct else "wrong->right" if vd.correct else "right->wrong"
            ] += 1
            rows.append(verdict_row(t["trajectory_id"], kind, vd, ts))
    inserted = 0
    if rows:
        out = Path(run_dir) if run_dir else db.with_suffix(".runs")
        path = write_parquet(
            rows,
            out / "reverify" / f"{short_hash(VERSION)}-{short_hash(*[r['trajectory_id'] for r in rows])}.parquet",
            "verdicts",
        )
        with transaction(db) as con:
            inserted = ingest_parquet(con, "verdicts", [path])
    return {
        "version": VERSION,
        "rescored": len(rows),
        "inserted": inserted,
        "flips": {k: flips.get(k, 0) for k in ("wrong->right", "right->wrong", "unchanged", "new")},
    }
