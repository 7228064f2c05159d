"""The per-round metrics behind the round's UI artifacts and ``ratchet report``: rollouts (per task and per source),
held-out evaluations and completions of the round's incumbent and candidate, training. Each ``*_of_rounds`` query
takes a list of rounds and groups by round, so a report of 30 rounds runs it once, not 30 times; the single-round
functions call it with one round."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb

from ratchet.store.queries import _rows, verdict_cte

# Report queries over many rounds (``$round_ids``) read only rows created since ``$since``: zone maps on
# ``created_at`` then skip the row groups of older rounds, so a query's time grows with the rounds it reports, not
# with the store (benchmarks/store_scale.py).
IN_ROUNDS = "list_contains(CAST($round_ids AS VARCHAR[]), round_id)"
# Slack on ``$since`` for the clocks of the machines that wrote the rows (a round's shards, a worker elsewhere).
CLOCK_SLACK = timedelta(days=1)


def by_round(cur, round_ids: list[str], keep_round_id: bool = False) -> dict[str, list[dict]]:
    """A cursor's rows (each with a ``round_id`` column) as ``{round_id: [row, ...]}`` in the cursor's order, with an
    empty list for each of ``round_ids`` that has none; the rows lose their ``round_id`` unless ``keep_round_id``."""
    out: dict[str, list[dict]] = {rid: [] for rid in round_ids}
    for row in _rows(cur):
        out.setdefault(row["round_id"] if keep_round_id else row.pop("round_id"), []).append(row)
    return out


def _since(row: tuple | None) -> datetime | str:
    """``row``'s ``(count, non-null count, min)`` as a bound (less ``CLOCK_SLACK``), or ``'-infinity'`` (no bound)
    when a time is missing."""
    if row is None or row[2] is None or row[0] != row[1]:
        return "-infinity"
    return row[2] - CLOCK_SLACK


def since_of(con: duckdb.DuckDBPyConnection, checkpoints_sql: str, round_ids: list[str]) -> datetime | str:
    """The earliest ``checkpoints.created_at`` of the ids ``checkpoints_sql`` selects (a query over ``$round_ids``)
    less ``CLOCK_SLACK``: a checkpoint's evaluations are written after its checkpoints row (made by its training run,
    or by the evaluation that first meets it), their verdicts after them. ``'-infinity'`` when one has no row."""
    return _since(
        con.execute(
            f"""WITH ids AS ({checkpoints_sql})
                SELECT count(*), count(c.created_at), min(c.created_at) FROM ids LEFT JOIN checkpoints c USING (checkpoint_id)""",
            {"round_ids": list(round_ids)},
        ).fetchone()
    )


def since_of_rounds(con: duckdb.DuckDBPyConnection, round_ids: list[str]) -> datetime | str:
    """The earliest start of ``round_ids`` less ``CLOCK_SLACK``: a round's rollouts are written after its round row
    (``start_round``, kept when a crashed round resumes), their verdicts after them. ``'-infinity'`` when a round
    has no start recorded."""
    return _since(
        con.execute(
            f"SELECT count(*), count(started_at), min(started_at) FROM rounds WHERE {IN_ROUNDS}", {"round_ids": list(round_ids)}
        ).fetchone()
    )


# The per-round report queries each take a list of rounds (``$round_ids``) and group by round: a report of 30 rounds
# ranks the verdicts once per query, not once per round, and reads only rows created since ``$since``
# (``ratchet.store.queries.since_of_rounds``).
ROLLOUT_METRICS_SQL = f"""
WITH {verdict_cte(f"{IN_ROUNDS} AND purpose = 'rollout'", bounded=True)},
r AS (SELECT t.round_id, p.task, t.prompt_id, t.completion_tokens, t.finish_reason, v.correct, v.reward, v.format_ok, v.reason
      FROM trajectories t JOIN prompts p USING (prompt_id) JOIN v USING (trajectory_id)
      WHERE list_contains(CAST($round_ids AS VARCHAR[]), t.round_id) AND t.purpose = 'rollout'
        AND t.created_at >= CAST($since AS TIMESTAMPTZ)),
per_prompt AS (SELECT round_id, task, prompt_id, count(*) AS n, count(*) FILTER (WHERE correct) AS c FROM r GROUP BY ALL),
by_prompt AS (SELECT round_id, coalesce(task, 'all') AS task, count(*) AS prompts, min(n) AS k, avg((c > 0)::INT) AS pass_at_k
              FROM per_prompt GROUP BY GROUPING SETS ((round_id, task), (round_id))),
by_traj AS (SELECT round_id, coalesce(task, 'all') AS task, count(*) AS rollouts, avg(correct::INT) AS pass_at_1,
                   avg(reward) AS reward_mean, avg((NOT format_ok)::INT) AS format_error_rate,
                   avg((finish_reason = 'length')::INT) AS truncated_rate,
                   quantile_cont(completion_tokens, 0.9) AS completion_tokens_p90, histogram(reason) AS reasons
            FROM r GROUP BY GROUPING SETS ((round_id, task), (round_id)))
SELECT round_id, task, prompts, rollouts, k, pass_at_1, pass_at_k, reward_mean, format_error_rate, truncated_rate,
       completion_tokens_p90, reasons
FROM by_traj JOIN by_prompt USING (round_id, task) WHERE rollouts > 0 ORDER BY round_id, task = 'all', task
"""


def _many(sql: str, con: duckdb.DuckDBPyConnection, round_ids: list[str], **params) -> dict[str, list[dict]]:
    return by_round(con.execute(sql, {"round_ids": list(round_ids), **params}), round_ids)


def _rollouts(
    sql: str, con: duckdb.DuckDBPyConnection, round_ids: list[str], verifier_version: str | None
) -> dict[str, list[dict]]:
    """A rollout query (``$round_ids``, ``$verifier_version``, ``$since``) bounded by the rounds' start."""
    return _many(sql, con, round_ids, verifier_version=verifier_version, since=since_of_rounds(con, round_ids))


def rollout_metrics_of_rounds(
    con: duckdb.DuckDBPyConnection, round_ids: list[str], verifier_version: str | None = None
) -> dict[str, list[dict]]:
    """``rollout_metrics`` of each of ``round_ids`` in one query: ``{round_id: rows}``."""
    return _rollouts(ROLLOUT_METRICS_SQL, con, round_ids, verifier_version)


def rollout_metrics(con: duckdb.DuckDBPyConnection, round_id: str, verifier_version: str | None = None) -> list[dict]:
    """Per task of a round's rollouts, then one ``task = 'all'`` row (none when the round has no scored rollouts).

    Each row: ``prompts``, ``rollouts``, ``k`` (the smallest group size), ``pass_at_1`` (mean correct,
    the unbiased pass@1), ``pass_at_k`` (share of prompts with at least one correct rollout),
    ``reward_mean``, ``format_error_rate`` (share with ``format_ok`` false; NULL if unchecked),
    ``truncated_rate`` (share cut at ``max_new_tokens``), ``completion_tokens_p90`` (tokens, linear
    interpolation as ``torch.quantile``) and ``reasons`` (``{verdict reason: count}``). Verdicts are
    those of ``verifier_version``, or each trajectory's newest verdict when it is None.
    """
    return rollout_metrics_of_rounds(con, [round_id], verifier_version)[round_id]


ROLLOUT_SOURCE_SQL = f"""
WITH {verdict_cte(f"{IN_ROUNDS} AND purpose = 'rollout'", bounded=True)}
SELECT t.round_id, p.source, coalesce(p.task_format, 'math') AS task_format, any_value(v.verifier) AS verifier,
       count(DISTINCT t.prompt_id) AS prompts, count(*) AS rollouts, avg(v.correct::INT) AS pass_at_1,
       avg(v.reward) AS reward_mean, histogram(v.reason) AS reasons,
       count(*) FILTER (WHERE v.reason = 'verifier_error') AS verifier_errors
FROM trajectories t JOIN prompts p USING (prompt_id) JOIN v USING (trajectory_id)
WHERE list_contains(CAST($round_ids AS VARCHAR[]), t.round_id) AND t.purpose = 'rollout'
  AND t.created_at >= CAST($since AS TIMESTAMPTZ)
GROUP BY ALL ORDER BY t.round_id, p.source
"""


def rollout_metrics_by_source_of_rounds(
    con: duckdb.DuckDBPyConnection, round_ids: list[str], verifier_version: str | None = None
) -> dict[str, list[dict]]:
    """``rollout_metrics_by_source`` of each of ``round_ids`` in one query: ``{round_id: rows}``."""
    return _rollouts(ROLLOUT_SOURCE_SQL, con, round_ids, verifier_version)


def rollout_metrics_by_source(con: duckdb.DuckDBPyConnection, round_id: str, verifier_version: str | None = None) -> list[dict]:
    """Per task source of a round's rollouts: ``source``, ``task_format``, ``verifier`` (outcome verifier of its
    verdicts: ``plugin:<ref>`` for a records source's own), ``prompts``, ``rollouts``, ``pass_at_1``, ``reward_mean``,
    ``reasons``, ``verifier_errors`` (rollouts whose verifier raised, hung or returned garbage); verdicts as in
    ``rollout_metrics``."""
    return rollout_metrics_by_source_of_rounds(con, [round_id], verifier_version)[round_id]


# Each round's incumbent and candidate (from its gate decision, else the output of its last on-policy step's
# training run: steps run in order, so the last to finish; `step` itself is absent from stores made before
# multi-step rounds, which `ratchet report` reads without migrating), and the eval sets its campaign evaluated on.
_ROUND_CKPTS_CTE = f"""
last_run AS (SELECT round_id, output_checkpoint_id FROM training_runs WHERE {IN_ROUNDS}
             QUALIFY row_number() OVER (PARTITION BY round_id ORDER BY finished_at DESC) = 1),
rc AS (SELECT r.round_id, r.campaign_id, coalesce(r.finished_at, now()) AS as_of, x.role, x.checkpoint_id
       FROM rounds r LEFT JOIN gate_decisions g USING (round_id) LEFT JOIN last_run l USING (round_id),
            LATERAL (VALUES ('incumbent', r.incumbent_checkpoint_id),
                            ('candidate', coalesce(g.candidate_checkpoint_id, l.output_checkpoint_id)))
              x(role, checkpoint_id)
       WHERE list_contains(CAST($round_ids AS VARCHAR[]), r.round_id) AND x.checkpoint_id IS NOT NULL),
sets AS (SELECT DISTINCT r.campaign_id, t.eval_set_id FROM trajectories t JOIN rounds r USING (round_id)
         WHERE r.campaign_id IN (SELECT campaign_id FROM rc) AND t.eval_set_id IS NOT NULL)"""


def round_evaluations_of_rounds(con: duckdb.DuckDBPyConnection, round_ids: list[str]) -> dict[str, list[dict]]:
    """``round_evaluations`` of each of ``round_ids`` in one query: ``{round_id: rows}``."""
    sql = f"""
        WITH {_ROUND_CKPTS_CTE}
        SELECT rc.round_id, rc.role, rc.checkpoint_id, e.metric, e.value, e.num_prompts
        FROM rc JOIN sets s ON s.campaign_id = rc.campaign_id
        JOIN evaluations e ON e.checkpoint_id = rc.checkpoint_id AND e.eval_set_id = s.eval_set_id
        QUALIFY row_number() OVER (PARTITION BY rc.round_id, rc.role, e.metric
                                   ORDER BY e.created_at <= rc.as_of DESC, e.created_at DESC) = 1
        ORDER BY rc.round_id, rc.role = 'candidate', e.metric"""
    return _many(sql, con, round_ids)


def round_evaluations(con: duckdb.DuckDBPyConnection, round_id: str) -> list[dict]:
    """Held-out metrics of a round's incumbent and candidate: rows ``{role, checkpoint_id, metric, value, num_prompts}``.

    An evaluation stored by an earlier round is reused (the gate does the same). If the campaign
    evaluated on several eval sets (a verifier upgrade changes the set's id), each metric is the one
    stored last before the round finished.
    """
    return round_evaluations_of_rounds(con, [round_id])[round_id]


def heldout_completion_metrics_of_rounds(
    con: duckdb.DuckDBPyConnection, round_ids: list[str], verifier_version: str | None = None
) -> dict[str, list[dict]]:
    """``heldout_completion_metrics`` of each of ``round_ids`` in one query: ``{round_id: rows}``."""
    since = since_of(con, f"WITH {_ROUND_CKPTS_CTE} SELECT checkpoint_id FROM rc", round_ids)
    scope = "checkpoint_id IN (SELECT checkpoint_id FROM rc) AND eval_set_id IN (SELECT eval_set_id FROM sets)"
    sql = f"""
        WITH {_ROUND_CKPTS_CTE}, {verdict_cte(scope, bounded=True)}
        SELECT rc.round_id, rc.role, rc.checkpoint_id, count(*) AS completions,
               quantile_cont(t.completion_tokens, 0.9) AS completion_tokens_p90,
               avg((NOT v.format_ok)::INT) AS format_error_rate, avg((t.finish_reason = 'length')::INT) AS truncated_rate,
               histogram(v.reason) AS reasons
        FROM rc JOIN sets s ON s.campaign_id = rc.campaign_id
        JOIN trajectories t ON t.checkpoint_id = rc.checkpoint_id AND t.eval_set_id = s.eval_set_id
          AND t.created_at >= CAST($since AS TIMESTAMPTZ)
        JOIN v USING (trajectory_id)
        GROUP BY rc.round_id, rc.role, rc.checkpoint_id ORDER BY rc.round_id, rc.role = 'candidate'"""
    return _many(sql, con, round_ids, verifier_version=verifier_version, since=since)


def heldout_completion_metrics(con: duckdb.DuckDBPyConnection, round_id: str, verifier_version: str | None = None) -> list[dict]:
    """Held-out completions (greedy and sampled) of a round's incumbent and candidate, one row per role.

    Each row: ``role``, ``checkpoint_id``, ``completions``, ``completion_tokens_p90`` (tokens),
    ``format_error_rate``, ``truncated_rate``, ``reasons`` (``{verdict reason: count}``), over the
    campaign's eval sets; verdicts chosen as in ``rollout_metrics``.
    """
    return heldout_completion_metrics_of_rounds(con, [round_id], verifier_version)[round_id]


def round_training_of_rounds(con: duckdb.DuckDBPyConnection, round_ids: list[str]) -> dict[str, dict | None]:
    """``round_training`` of each of ``round_ids`` in one query: ``{round_id: row or None}``."""
    rows = _many(
        """
        SELECT round_id, algorithm, count(*) OVER w AS steps, sum(num_examples) OVER w AS num_examples,
               CASE WHEN algorithm = 'grpo' THEN TRY_CAST(json_extract_string(metrics_json, '$."train/kl/mean"') AS DOUBLE) END AS kl_mean,
               CASE WHEN algorithm = 'grpo' THEN TRY_CAST(json_extract_string(metrics_json, '$."train/entropy/mean"') AS DOUBLE) END
                 AS entropy_mean,
               (SELECT map_from_entries(list(struct_pack(k := key, v := TRY_CAST(value AS DOUBLE))))
                  FROM json_each(metrics_json) WHERE json_type(value) IN ('DOUBLE', 'BIGINT', 'UBIGINT')) AS metrics
        FROM training_runs WHERE list_contains(CAST($round_ids AS VARCHAR[]), round_id)
        WINDOW w AS (PARTITION BY round_id)
        QUALIFY row_number() OVER (PARTITION BY round_id ORDER BY finished_at DESC) = 1""",
        con,
        round_ids,
    )
    return {rid: (found[0] if found else None) for rid, found in rows.items()}


def round_training(con: duckdb.DuckDBPyConnection, round_id: str) -> dict | None:
    """The round's training: ``{algorithm, steps, num_examples, kl_mean, entropy_mean, metrics}``, or None.

    A round of several on-policy steps (``grpo.steps_per_round``) has a training run per step:
    ``steps`` counts them, ``num_examples`` sums them, and the metrics are the last step's (those the
    gate's guards read). ``kl_mean`` (mean KL to the reference over optimizer steps) and
    ``entropy_mean`` (nats per token) are read from them when the algorithm is grpo, else NULL;
    ``metrics`` holds every scalar training metric (``{name: value}``; per-step lists left out).
    """
    return round_training_of_rounds(con, [round_id])[round_id]


def training_origins_of_rounds(con: duckdb.DuckDBPyConnection, round_ids: list[str]) -> dict[str, dict[str, int]]:
    """``training_origins`` of each of ``round_ids`` in one query: ``{round_id: {origin: count}}``."""
    has = con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = 'training_examples' AND column_name = 'origin'"
    ).fetchone()[0]
    origin = "coalesce(te.origin, 'rollout')" if has else "'rollout'"
    rows = _many(
        f"""SELECT tr.round_id, {origin} AS origin, count(*) AS n FROM training_runs tr JOIN training_examples te USING (training_run_id)
            WHERE list_contains(CAST($round_ids AS VARCHAR[]), tr.round_id) GROUP BY ALL""",
        con,
        round_ids,
    )
    return {rid: {r["origin"]: r["n"] for r in found} for rid, found in rows.items()}


def training_origins(con: duckdb.DuckDBPyConnection, round_id: str) -> dict[str, int]:
    """Training examples of a round's training runs per origin (``rollout`` | ``reference`` | ``general``)."""
    return training_origins_of_rounds(con, [round_id])[round_id]


def round_phases(con: duckdb.DuckDBPyConnection, round_ids: list[str]) -> dict[str, str | None]:
    """``round_phase`` of each of ``round_ids`` in one query: ``{round_id: phase or None}``."""
    has = con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = 'rounds' AND column_name = 'stage'"
    ).fetchone()[0]
    if not has:  # a store from before phases, opened read-only (not migrated)
        return dict.fromkeys(round_ids)
    rows = _many(f"SELECT round_id, stage FROM rounds WHERE {IN_ROUNDS}", con, round_ids)
    return {rid: (found[0]["stage"] if found else None) for rid, found in rows.items()}


def round_phase(con: duckdb.DuckDBPyConnection, round_id: str) -> str | None:
    """The ``[[phases]]`` name a round ran in (``rounds.stage``); None for a campaign without phases or an old store."""
    return round_phases(con, [round_id])[round_id]


def gate_set_rows_of_rounds(con: duckdb.DuckDBPyConnection, round_ids: list[str]) -> dict[str, list[dict]]:
    """``gate_set_rows`` of each of ``round_ids`` in one query: ``{round_id: rows}``."""
    has = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'gate_set_decisions'").fetchone()[0]
    if not has:
        return {rid: [] for rid in round_ids}
    sql = f"SELECT * FROM gate_set_decisions WHERE {IN_ROUNDS} ORDER BY round_id, eval_name"
    return by_round(con.execute(sql, {"round_ids": list(round_ids)}), round_ids, keep_round_id=True)


def gate_set_rows(con: duckdb.DuckDBPyConnection, round_id: str) -> list[dict]:
    """The per-eval-set verdicts of a round's gate (empty for rounds gated before sets were recorded)."""
    return gate_set_rows_of_rounds(con, [round_id])[round_id]
