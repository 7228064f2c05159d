"""``ratchet reverify``: re-score stored trajectories with the current verifier version; ``carry_over``: the same for
a checkpoint's stored evaluation before the gate compares it.

New verdict rows are added next to the old ones (never overwritten), so a verifier change is
auditable in SQL: join the two versions on ``trajectory_id`` to see every flip.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from ratchet.loop.campaign.round_context import Ctx, now, short_hash
from ratchet.loop.evaluation.episode_scoring import environment_judges, failed_episode_verdicts, stored_episode
from ratchet.loop.evaluation.scoring import reward_spec, reward_version, score_items, source_verifiers, verdict_row
from ratchet.store.db import connect, init_db, require_store, transaction
from ratchet.store.ingest import ingest_parquet, insert_rows, write_parquet
from ratchet.store.queries import eval_outcomes, promoted_before, trajectories_to_reverify
from ratchet.verifiers.plugins import PluginError
from ratchet.verifiers.reward import RewardSpec

# Verdict names: the outcome verifier (math, code); 'composite' in stores written before task formats; a records
# source's own verifier adds its 'plugin:<ref>'.
VERIFIERS = ["math", "code", "composite"]


def _campaign_specs(con) -> tuple[dict[str, tuple[RewardSpec, str, list[str]]], dict[str, str]]:
    """Per stored campaign config: its reward spec, its current verifier version and its verifier names; and the
    campaigns whose own verifier cannot be imported now (name -> why), which are left as they are."""
    specs: dict[str, tuple[RewardSpec, str, list[str]]] = {}
    skipped: dict[str, str] = {}
    for name, config_json in con.execute("SELECT name, config_json FROM campaigns ORDER BY created_at").fetchall():
        if config_json in specs:
            continue
        config = json.loads(config_json)
        spec = reward_spec(config.get("verifier", {}), (config.get("tasks") or {}).get("sources") or ())
        try:
            plugins = source_verifiers(spec)
            judges = environment_judges(spec)  # environments whose score() judges their episodes
        except PluginError as e:
            skipped[name] = str(e)
            continue
        names = [v.name for v in plugins.values()] + [j.name for j in judges.values()]
        specs[config_json] = (spec, reward_version(spec, plugins), names)
    return specs, skipped


def reverify(db: str | Path, *, run_dir: str | Path | None = None) -> dict:
    """Score every trajectory lacking a verdict of its campaign's current verifier version (the composite verifier's,
    with its sources' own verifiers' identities: ``ratchet.loop.evaluation.scoring.reward_version``; an edited plugin
    file is a new version).

    The new verdicts are written as Parquet under ``run_dir`` (the campaign config's ``run_dir``;
    default ``<db without suffix>.runs``) before they are ingested.

    Returns:
        ``{"version", "versions": {campaign config hash: version}, "rescored", "flips": {"wrong->right",
        "right->wrong", "unchanged", "new"}, "inserted", "skipped": {campaign: why}}`` (``version``: the versions,
        comma-separated; ``skipped``: campaigns whose own verifier cannot be imported now).
    Raises:
        StoreError: the store cannot be opened or is not a Ratchet store.
    """
    db = Path(db)
    if db.is_file():
        init_db(db)  # a store written before task formats gains the prompt columns the query reads (refuses a foreign file)
    by_config: dict[str, list[dict]] = {}
    with connect(db, read_only=True) as con:
        require_store(con, db)
        specs, skipped = _campaign_specs(con)
        for version in sorted({v for _, v, _ in specs.values()}):
            names = VERIFIERS + sorted({n for _, v, ns in specs.values() if v == version for n in ns})
            for t in trajectories_to_reverify(con, names, version):
                if t["config_json"] in specs and specs[t["config_json"]][1] == version:
                    by_config.setdefault(t["config_json"], []).append(t)
    flips: Counter[str] = Counter()
    rows: list[dict] = []
    for config_json, items in by_config.items():
        episodes = [stored_episode(t) for t in items]  # an environment with score() judges its episodes, as in a round
        scored = score_items([t["completion"] for t in items], items, specs[config_json][0], episodes)
        vds = failed_episode_verdicts(items, [vd for _, vd in scored])  # an environment that raised: verifier_error
        ts = now()
        for t, (kind, _), vd in zip(items, scored, vds):
            prev = t["prev_correct"]
            flips[
                "new" if prev is None else "unchanged" if prev == vd.correct else "wrong->right" if vd.correct else "right->wrong"
            ] += 1
            rows.append(verdict_row(t["trajectory_id"], kind, vd, ts))
    inserted = 0
    versions = sorted({v for _, v, _ in specs.values()})
    if rows:
        out = Path(run_dir) if run_dir else db.with_suffix(".runs")
        path = write_parquet(
            rows,
            out / "reverify" / f"{short_hash(*versions)}-{short_hash(*[r['trajectory_id'] for r in rows])}.parquet",
            "verdicts",
        )
        with transaction(db) as con:
            inserted = ingest_parquet(con, "verdicts", [path])
    return {
        "version": ", ".join(versions) or reward_version(RewardSpec()),
        "versions": {short_hash(c): v for c, (_, v, _) in specs.items()},
        "rescored": len(rows),
        "inserted": inserted,
        "flips": {k: flips.get(k, 0) for k in ("wrong->right", "right->wrong", "unchanged", "new")},
        "skipped": skipped,
    }


def carry_over(con, ctx: Ctx, checkpoint_id: str, *, version: str | None = None) -> int:
    """Re-verify a checkpoint's stored evaluation made under an older verifier version, so the gate compares outcomes
    of one verifier version without generating again.

    A verifier change gives the campaign a new eval set id (the version is part of it), so the incumbent and the best
    checkpoints ever promoted have no outcomes on it. When ``checkpoint_id`` has none on ``ctx.eval_set_id()`` but has
    eval completions on the id the same prompts and decoding settings had under an older version (one found in the
    store's verdicts), those completions are copied onto the current eval set (same text and tokens; trajectory ids of
    the current eval set) and scored by the current verifier, next to the old rows. Returns the completions carried
    over (0: nothing to do, or no older evaluation to re-verify). ``version``: default the campaign's
    (``ctx.verifier_version``).
    """
    version = version or ctx.verifier_version
    es = ctx.eval_set_id()
    if eval_outcomes(con, checkpoint_id, es, version):
        return 0
    olds = [v for (v,) in con.execute("SELECT DISTINCT verifier_version FROM verdicts ORDER BY 1").fetchall() if v != version]
    prompts = {p.prompt_id: p for p in ctx.heldout()}
    for old in olds:
        cur = con.execute(
            """SELECT * FROM trajectories WHERE checkpoint_id = ? AND eval_set_id = ?
               AND purpose IN ('eval_greedy', 'eval_sample') ORDER BY prompt_id, purpose, sample_index""",
            [checkpoint_id, ctx.eval_set_id(verifier=old)],
        )
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
        greedy = {r["prompt_id"] for r in rows if r["purpose"] == "eval_greedy"}
        if not rows or not greedy <= set(prompts) or (greedy != set(prompts) and not ctx.cfg.gate.sequential):
            continue  # another prompt set, or a partial evaluation only a sequential gate can use
        copies = [
            {
                **r,
                "trajectory_id": short_hash(es, r["prompt_id"], checkpoint_id, r["purpose"], r["sample_index"]),
                "eval_set_id": es,
            }
            for r in rows
        ]
        episodes = [stored_episode(r) for r in copies]  # an environment with score() judges its episodes again
        scored = score_items(
            [r["completion"] for r in copies], [asdict(prompts[r["prompt_id"]]) for r in copies], ctx.reward, episodes
        )
        vds = failed_episode_verdicts(copies, [vd for _, vd in scored])
        ts = now()
        insert_rows(con, "trajectories", copies)
        judged = [verdict_row(r["trajectory_id"], kind, vd, ts) for r, (kind, _), vd in zip(copies, scored, vds)]
        insert_rows(con, "verdicts", judged)
        return len(copies)
    return 0


def carry_over_promoted(con, ctx: Ctx, round_index: int) -> list[str]:
    """``carry_over`` for the base and every checkpoint promoted before ``round_index`` (the best-ever candidates the
    gate compares with); returns the ids whose evaluation was re-verified."""
    return [c for c in promoted_before(con, ctx.campaign_id, round_index) if carry_over(con, ctx, c)]
