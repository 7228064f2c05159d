"""Triage of a gate decision: the held-out prompts that flipped between incumbent and candidate (the ``gate_flips``
view), with both greedy completions and their verdicts, for the gate artifact and ``ratchet report``."""

from __future__ import annotations

import duckdb

from ratchet.store.read.round_metrics import IN_ROUNDS, by_round, since_of

# The gate_flips view's rows of some rounds (``$round_ids``), computed from their checkpoints' greedy verdicts only,
# written since ``$since`` (``ratchet.store.read.round_metrics.since_of``); the view aggregates every greedy verdict of the store
# first: ~2.6 s per round at 10M trajectories, benchmarks/store_scale.py.
_GATES = f"""SELECT round_id, eval_set_id, verifier_version, incumbent_checkpoint_id AS inc, candidate_checkpoint_id AS cand
               FROM gate_decisions
               WHERE {IN_ROUNDS} AND candidate_checkpoint_id IS NOT NULL AND eval_set_id IS NOT NULL
                 AND verifier_version IS NOT NULL"""
_FLIPS_CTES = f"""
    WITH g AS ({_GATES}),
         side AS (SELECT t.checkpoint_id, t.eval_set_id, t.prompt_id, v.verifier_version, t.completion, t.finish_reason,
                         v.correct, v.reason, v.parsed
                  FROM trajectories t JOIN verdicts v USING (trajectory_id)
                  WHERE t.purpose = 'eval_greedy' AND t.checkpoint_id IN (SELECT inc FROM g UNION ALL SELECT cand FROM g)
                    AND t.eval_set_id IN (SELECT eval_set_id FROM g)
                    AND t.created_at >= CAST($since AS TIMESTAMPTZ) AND v.created_at >= CAST($since AS TIMESTAMPTZ)
                  QUALIFY row_number() OVER (PARTITION BY t.checkpoint_id, t.eval_set_id, t.prompt_id, v.verifier_version
                                             ORDER BY v.correct DESC, t.sample_index) = 1),
         -- a side's first row is its best verdict, so its correct is the view's bool_or(correct)
         f AS (SELECT g.round_id, g.eval_set_id, i.prompt_id, i.correct AS incumbent_correct, c.correct AS candidate_correct
               FROM g JOIN side i ON i.checkpoint_id = g.inc AND i.eval_set_id = g.eval_set_id AND i.verifier_version = g.verifier_version
                      JOIN side c ON c.checkpoint_id = g.cand AND c.eval_set_id = g.eval_set_id
                                 AND c.verifier_version = g.verifier_version AND c.prompt_id = i.prompt_id
               WHERE i.correct <> c.correct)"""
_FLIPS_SQL = (
    _FLIPS_CTES
    + """
    SELECT f.round_id, f.eval_set_id, f.prompt_id, coalesce(m.eval_name, 'heldout') AS eval_name, p.question, p.answer AS gold,
           f.incumbent_correct, f.candidate_correct,
           CASE WHEN f.candidate_correct THEN 'wrong -> right' ELSE 'right -> wrong' END AS flip,
           i.completion AS incumbent_completion, i.reason AS incumbent_reason, i.parsed AS incumbent_parsed,
           i.finish_reason AS incumbent_finish_reason,
           c.completion AS candidate_completion, c.reason AS candidate_reason, c.parsed AS candidate_parsed,
           c.finish_reason AS candidate_finish_reason
    FROM f JOIN g USING (round_id)
    JOIN side i ON i.checkpoint_id = g.inc AND i.eval_set_id = f.eval_set_id AND i.prompt_id = f.prompt_id
               AND i.verifier_version = g.verifier_version
    JOIN side c ON c.checkpoint_id = g.cand AND c.eval_set_id = f.eval_set_id AND c.prompt_id = f.prompt_id
               AND c.verifier_version = g.verifier_version
    LEFT JOIN prompts p ON p.prompt_id = f.prompt_id
    LEFT JOIN (SELECT DISTINCT r.round_id, e.prompt_id, e.eval_name
               FROM eval_set_prompts e JOIN rounds r USING (campaign_id)) m ON m.round_id = f.round_id AND m.prompt_id = f.prompt_id
    QUALIFY CAST($limit AS BIGINT) IS NULL
         OR row_number() OVER (PARTITION BY f.round_id ORDER BY f.candidate_correct, eval_name, f.prompt_id) <= CAST($limit AS BIGINT)
    ORDER BY f.round_id, f.candidate_correct, eval_name, f.prompt_id"""
)


def _params(con: duckdb.DuckDBPyConnection, round_ids: list[str]) -> dict:
    since = since_of(con, f"SELECT inc AS checkpoint_id FROM ({_GATES}) UNION ALL SELECT cand FROM ({_GATES})", round_ids)
    return {"round_ids": list(round_ids), "since": since}


def round_flips_of_rounds(
    con: duckdb.DuckDBPyConnection, round_ids: list[str], limit: int | None = None
) -> dict[str, list[dict]]:
    """``round_flips`` of each of ``round_ids`` in one query (``limit`` per round): ``{round_id: rows}``."""
    return by_round(con.execute(_FLIPS_SQL, {**_params(con, round_ids), "limit": limit}), round_ids)


def round_flips(con: duckdb.DuckDBPyConnection, round_id: str, limit: int | None = None) -> list[dict]:
    """The round's flipped held-out prompts (``gate_flips``), right -> wrong first, each with its eval set name, the
    question and gold, and both checkpoints' greedy completion with the verdict's reason and parsed answer.

    ``limit``: at most that many rows (None: all). Empty for a round without a judged candidate, or whose decision
    did not record its eval set and verifier version.
    """
    return round_flips_of_rounds(con, [round_id], limit)[round_id]


def flip_counts(con: duckdb.DuckDBPyConnection, round_id: str) -> dict[str, int]:
    """``{"right_to_wrong": n, "wrong_to_right": m}`` of the round's flipped prompts (``gate_flips``)."""
    row = con.execute(
        _FLIPS_CTES + " SELECT count(*) FILTER (WHERE incumbent_correct), count(*) FILTER (WHERE candidate_correct) FROM f",
        _params(con, [round_id]),
    ).fetchone()
    return {"right_to_wrong": row[0], "wrong_to_right": row[1]}
