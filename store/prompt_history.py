"""Canned queries behind prompt selection (``tasks.selection``) and its report: recent verdicts, zero-variance groups.

Every function takes an open DuckDB connection and holds no state. The history reads only train-split rollouts
that the incumbent's lineage (the incumbent and its ancestors, unsaved on-policy steps included) generated in the
campaign's previous rounds, judged by the current verifier version; evaluation prompts never appear in it.
"""

from __future__ import annotations

import duckdb

from ratchet.store.queries import IS_EVAL_PROMPT, _rows

# Rollouts (one row per trajectory: correct under the verifier version) the incumbent's lineage generated on train
# prompts in rounds [round_index - window, round_index) of the campaign.
_LINEAGE_ROLLOUTS = """
WITH RECURSIVE lineage(checkpoint_id) AS (
    SELECT CAST($incumbent AS VARCHAR)
    UNION
    SELECT c.parent_id FROM checkpoints c JOIN lineage l ON c.checkpoint_id = l.checkpoint_id WHERE c.parent_id IS NOT NULL
), recent AS (
    SELECT t.trajectory_id, t.prompt_id, p.source, p.task, bool_or(v.correct) AS correct
    FROM trajectories t
    JOIN rounds r USING (round_id)
    JOIN prompts p USING (prompt_id)
    JOIN verdicts v USING (trajectory_id)
    WHERE r.campaign_id = $campaign_id AND r.round_index < $round_index AND r.round_index >= $round_index - $window
      AND t.purpose = 'rollout' AND p.split = 'train' AND v.verifier_version = $verifier_version
      AND t.checkpoint_id IN (SELECT checkpoint_id FROM lineage) AND NOT {NOT_EVAL}
    GROUP BY ALL
)
""".replace("{NOT_EVAL}", IS_EVAL_PROMPT)


def prompt_history(
    con: duckdb.DuckDBPyConnection, campaign_id: str, round_index: int, incumbent: str, verifier_version: str, window: int
) -> tuple[dict[str, tuple[int, int]], dict[tuple[str, str], tuple[int, int]]]:
    """Recent verdict counts for the incumbent's lineage: ``({prompt_id: (rollouts, correct)},
    {(source, task): (rollouts, correct)})`` over the campaign's rounds ``[round_index - window, round_index)``.

    Deterministic for a store: a round's own rollouts never count towards its choice (its index is excluded), so
    every step of a round, and a resumed round, sees the same history.
    """
    params = dict(
        campaign_id=campaign_id, round_index=round_index, incumbent=incumbent, verifier_version=verifier_version, window=window
    )
    per_prompt = con.execute(
        _LINEAGE_ROLLOUTS + "SELECT prompt_id, count(*), count(*) FILTER (WHERE correct) FROM recent GROUP BY prompt_id",
        params,
    ).fetchall()
    per_group = con.execute(
        _LINEAGE_ROLLOUTS + "SELECT source, task, count(*), count(*) FILTER (WHERE correct) FROM recent GROUP BY source, task",
        params,
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in per_prompt}, {(r[0], r[1]): (r[2], r[3]) for r in per_group}


# Per round and step: the groups sampled (prompt x step), how many had all-equal rewards (zero variance: no GRPO
# advantage, nothing new for RFT) and the completion tokens spent on them, with the round_prompts counts beside.
SELECTION_SUMMARY_SQL = f"""
WITH groups AS (
    SELECT t.round_id, {{STEP}} AS step, t.prompt_id, min(v.reward) = max(v.reward) AS zero_variance,
           sum(t.completion_tokens) AS tokens
    FROM trajectories t JOIN verdicts v USING (trajectory_id) JOIN prompts p USING (prompt_id)
    WHERE t.round_id IN (SELECT round_id FROM rounds WHERE campaign_id = $campaign_id) AND t.purpose = 'rollout'
      AND v.verifier_version = $verifier_version AND p.split = 'train' AND NOT {IS_EVAL_PROMPT}
    GROUP BY ALL
), picks AS ({{PICKS}})
SELECT r.round_index, g.step, count(*) AS groups, count(*) FILTER (WHERE g.zero_variance) AS zero_variance_groups,
       sum(g.tokens) AS tokens, coalesce(sum(g.tokens) FILTER (WHERE g.zero_variance), 0) AS zero_variance_tokens,
       any_value(k.drawn) AS drawn, any_value(k.refilled) AS refilled, any_value(k.estimates) AS estimates,
       any_value(k.selection) AS selection
FROM groups g JOIN rounds r USING (round_id) LEFT JOIN picks k ON k.round_id = g.round_id AND k.step = g.step
GROUP BY r.round_index, g.step ORDER BY r.round_index, g.step
"""
_PICKS = """SELECT round_id, step, count(*) AS drawn, count(*) FILTER (WHERE refill_pass > 0) AS refilled,
           list(estimate ORDER BY position) AS estimates, any_value(selection) AS selection
    FROM round_prompts GROUP BY round_id, step"""
_NO_PICKS = """SELECT NULL::VARCHAR AS round_id, NULL::INT AS step, NULL::BIGINT AS drawn, NULL::BIGINT AS refilled,
           NULL::DOUBLE[] AS estimates, NULL::VARCHAR AS selection WHERE false"""


def selection_summary(con: duckdb.DuckDBPyConnection, campaign_id: str, verifier_version: str) -> list[dict]:
    """Rows ``{round_index, step, groups, zero_variance_groups, tokens, zero_variance_tokens, drawn, refilled,
    estimates, selection}`` per round and on-policy step (tokens: completion tokens of the step's rollouts;
    ``drawn``/``refilled``/``estimates`` NULL for rounds recorded before ``round_prompts``)."""
    # A store an older Ratchet made, opened read-only (so not migrated), may lack round_prompts or trajectories.step.
    has = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'round_prompts'").fetchone()[0]
    step = con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = 'trajectories' AND column_name = 'step'"
    ).fetchone()[0]
    sql = SELECTION_SUMMARY_SQL.replace("{PICKS}", _PICKS if has else _NO_PICKS)
    sql = sql.replace("{STEP}", "coalesce(t.step, 0)" if step else "0")
    return _rows(con.execute(sql, {"campaign_id": campaign_id, "verifier_version": verifier_version}))


def round_selection(con: duckdb.DuckDBPyConnection, campaign_id: str, verifier_version: str) -> list[dict]:
    """``selection_summary`` summed over each round's steps: one row per round, ``estimates`` concatenated."""
    out: dict[int, dict] = {}
    for r in selection_summary(con, campaign_id, verifier_version):
        o = out.setdefault(r["round_index"], {"round_index": r["round_index"], "selection": r["selection"], "estimates": []})
        for k in ("groups", "zero_variance_groups", "tokens", "zero_variance_tokens", "drawn", "refilled"):
            o[k] = (o.get(k) or 0) + (r[k] or 0) if r[k] is not None or o.get(k) is not None else None
        o["estimates"] += r["estimates"] or []
        o["selection"] = o["selection"] or r["selection"]
    return list(out.values())
