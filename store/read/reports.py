"""Queries for what people read: the status and report tables, pass@1 history, sweeps, the gold-label audit. A
round's metrics are in ``ratchet.store.read.round_metrics``, the round path's own queries in ``ratchet.store.queries``."""

from __future__ import annotations

import json

import duckdb

from ratchet.store.queries import _rows


def training_metrics(con: duckdb.DuckDBPyConnection, round_id: str) -> dict | None:
    """The round's training-run metrics (``metrics_json`` decoded; its last on-policy step's), or None when it trained nothing."""
    row = con.execute(
        "SELECT metrics_json FROM training_runs WHERE round_id = ? ORDER BY coalesce(step, 0) DESC LIMIT 1", [round_id]
    ).fetchone()
    return None if row is None else json.loads(row[0])


def verifier_stats(con: duckdb.DuckDBPyConnection, round_id: str) -> list[dict]:
    """Rows of the ``round_verifier_stats`` view for one round (reasons as text)."""
    return _rows(
        con.execute(
            """SELECT source, task, purpose, verifier, n, reward_mean, reward_var, correct_rate, reasons::VARCHAR AS reasons
                                FROM round_verifier_stats WHERE round_id = ?""",
            [round_id],
        )
    )


# The base model's held-out pass@1 on each campaign's OWN eval set: campaigns sharing a store (and a base model)
# evaluate it on different prompts, so the evaluation must be one of the eval sets the campaign's gate compared on,
# or one the campaign's own rounds computed (round ids '<campaign_id>-r<n>'; gate rows before eval sets were stored).
BASE_PASS1_SQL = """WITH gate_sets AS (SELECT DISTINCT campaign_id, eval_set_id FROM gate_decisions WHERE eval_set_id IS NOT NULL)
    SELECT c.name, e.value AS base_pass1
    FROM campaigns c JOIN evaluations e ON e.checkpoint_id = c.base_checkpoint_id AND e.metric = 'heldout/pass@1'
    LEFT JOIN gate_sets gs ON gs.campaign_id = c.campaign_id AND gs.eval_set_id = e.eval_set_id
    WHERE gs.eval_set_id IS NOT NULL OR starts_with(e.round_id, c.campaign_id || '-r')
    QUALIFY row_number() OVER (PARTITION BY c.name ORDER BY gs.eval_set_id IS NULL, e.created_at) = 1"""


def base_pass1(con: duckdb.DuckDBPyConnection, campaign: str) -> float | None:
    """The base model's held-out pass@1 on the campaign's own eval set (``BASE_PASS1_SQL``), or None."""
    base = con.execute(f"SELECT base_pass1 FROM ({BASE_PASS1_SQL}) WHERE name = ?", [campaign]).fetchone()
    return None if base is None else base[0]


def campaign_table(con: duckdb.DuckDBPyConnection, campaign: str) -> tuple[float | None, list[dict]]:
    """The base model's held-out pass@1 (:func:`base_pass1`) and one ``round_summary`` row per round of a campaign."""
    rows = _rows(con.execute("SELECT * FROM round_summary WHERE campaign = ? ORDER BY round_index", [campaign]))
    return base_pass1(con, campaign), rows


def status_rows(con: duckdb.DuckDBPyConnection) -> tuple[list[str], list[dict]]:
    """Campaign names (oldest first) and every round with its state, owner (``'host:pid'`` or None) and gate decision."""
    names = [r[0] for r in con.execute("SELECT name FROM campaigns ORDER BY created_at").fetchall()]
    has_owner = con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = 'rounds' AND column_name = 'owner'"
    ).fetchone()[0]
    owner = "r.owner" if has_owner else "NULL"  # a store from before owners were recorded (read-only: not migrated here)
    rounds = _rows(
        con.execute(f"""SELECT c.name AS campaign, r.round_id, r.round_index, r.status, {owner} AS owner, g.decision, g.reason,
                                         g.candidate_pass1, g.incumbent_pass1
                                  FROM rounds r JOIN campaigns c USING (campaign_id) LEFT JOIN gate_decisions g USING (round_id)
                                  ORDER BY c.name, r.round_index""")
    )
    return names, rounds


def round_run_dirs(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """``{round_id: run dir}`` of the rounds whose manifest recorded the run dir they ran under."""
    has = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'round_manifests'").fetchone()[0]
    if not has:
        return {}
    rows = con.execute(
        "SELECT round_id, json_extract_string(run_settings_json, '$.run_dir') FROM round_manifests WHERE run_settings_json IS NOT NULL"
    ).fetchall()
    return {rid: d for rid, d in rows if d}


def pass1_history(con: duckdb.DuckDBPyConnection, campaign: str) -> list[dict]:
    """Held-out pass@1 across a campaign's rounds, for the plot: one row per round in index order.

    Each row: ``round_index``, ``status``, ``decision`` (NULL before the gate), ``incumbent_pass1``,
    ``candidate_pass1`` and ``kept_pass1`` (the pass@1 of the checkpoint the round ends with: the
    candidate's when promoted, else the incumbent's).
    """
    return _rows(
        con.execute(
            """
        SELECT r.round_index, r.status, g.decision, g.incumbent_pass1, g.candidate_pass1,
               CASE WHEN g.decision = 'promote' THEN g.candidate_pass1 ELSE g.incumbent_pass1 END AS kept_pass1
        FROM rounds r JOIN campaigns c USING (campaign_id) LEFT JOIN gate_decisions g USING (round_id)
        WHERE c.name = ? ORDER BY r.round_index""",
            [campaign],
        )
    )


def drift_history(con: duckdb.DuckDBPyConnection, campaign: str) -> list[dict]:
    """Each gated round's drift from the base (``ratchet.loop.gate.drift``), for the report's drift curve, in round order.

    Rows ``{round_index, eval_name, role, change, drift_upper_bound, max_drift}``: one per eval set with the base's
    stored outcomes (``change`` = candidate - base pass@1 on it); ``drift_upper_bound`` is the round's bound on its
    drift set (the one with the smallest bound; NULL on other sets); ``max_drift`` the setting the decision ran with.
    Empty for a store written before drift was measured.
    """
    has = con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = 'gate_set_decisions' AND column_name = 'base_pass1'"
    ).fetchone()[0]
    if not has:
        return []
    return _rows(
        con.execute(
            """
        SELECT r.round_index, s.eval_name, s.role, s.candidate_pass1 - s.base_pass1 AS change,
               CASE WHEN g.drift_set = s.eval_name THEN g.drift_upper_bound END AS drift_upper_bound,
               TRY_CAST(json_extract(g.settings_json, '$.max_drift') AS DOUBLE) AS max_drift
        FROM gate_set_decisions s JOIN gate_decisions g USING (round_id) JOIN rounds r USING (round_id)
        JOIN campaigns c ON c.campaign_id = r.campaign_id
        WHERE c.name = ? AND s.base_pass1 IS NOT NULL AND s.candidate_pass1 IS NOT NULL
        ORDER BY r.round_index, s.eval_name""",
            [campaign],
        )
    )


def report_campaigns(con: duckdb.DuckDBPyConnection, campaign: str | None = None) -> list[dict]:
    """Campaigns (oldest first, or only ``campaign``): ``{name, campaign_id, algorithm, base_checkpoint_id, created_at, rounds}``."""
    return _rows(
        con.execute(
            """
        SELECT c.name, c.campaign_id, json_extract_string(c.config_json, '$.algorithm') AS algorithm, c.base_checkpoint_id,
               c.created_at, (SELECT count(*) FROM rounds r WHERE r.campaign_id = c.campaign_id) AS rounds
        FROM campaigns c WHERE CAST(? AS VARCHAR) IS NULL OR c.name = ? ORDER BY c.created_at, c.name""",
            [campaign, campaign],
        )
    )


# --- gold-label audit --------------------------------------------------------------------------------
# Per prompt, the newest verdict of each sampled completion (all purposes, all rounds of the campaign:
# a trajectory's round_id is '<campaign_id>-r<n>'); the most frequent parsed answer (ties: smallest text)
# is flagged when it holds >= min_share of the samples, enough samples exist, and the verifier judged it wrong.
GOLD_AUDIT_SQL = """
WITH v AS (
    SELECT trajectory_id, parsed, correct FROM verdicts
    WHERE verifier = $verifier OR ($verifier = 'math' AND verifier = 'composite')  -- 'composite': stores before task formats
    QUALIFY row_number() OVER (PARTITION BY trajectory_id ORDER BY created_at DESC, verifier_version DESC) = 1
), s AS (
    SELECT c.name AS campaign, t.prompt_id, t.round_id, v.parsed, v.correct
    FROM trajectories t JOIN v USING (trajectory_id)
    JOIN campaigns c ON starts_with(t.round_id, c.campaign_id || '-r')
    WHERE CAST($campaign AS VARCHAR) IS NULL OR c.name = $campaign
), per_prompt AS (
    SELECT campaign, prompt_id, count(*) AS samples, count(DISTINCT round_id) AS rounds,
           count(*) FILTER (WHERE correct) AS correct_samples
    FROM s GROUP BY ALL
), votes AS (
    SELECT campaign, prompt_id, parsed, count(*) AS votes, bool_or(correct) AS judged_correct
    FROM s WHERE parsed IS NOT NULL GROUP BY campaign, prompt_id, parsed
), answers AS (
    SELECT *, row_number() OVER (PARTITION BY campaign, prompt_id ORDER BY votes DESC, parsed) AS rank FROM votes
)
SELECT a.campaign, a.prompt_id, p.question, p.answer AS gold, a.parsed AS majority_answer, a.votes,
       pp.samples, a.votes / pp.samples AS share, pp.correct_samples, pp.rounds, p.split
FROM answers a JOIN per_prompt pp USING (campaign, prompt_id) JOIN prompts p USING (prompt_id)
WHERE a.rank = 1 AND NOT a.judged_correct AND pp.samples >= $min_samples AND a.votes / pp.samples >= $min_share
ORDER BY share DESC, a.votes DESC, a.campaign, a.prompt_id
"""


def gold_audit(
    con: duckdb.DuckDBPyConnection,
    *,
    campaign: str | None = None,
    min_share: float = 0.75,
    min_samples: int = 4,
    verifier: str = "math",
) -> list[dict]:
    """Prompts whose gold label may be wrong: most samples agree on one answer the verifier judged wrong.

    Counts every sampled completion of the prompt across the campaign's rounds (rollouts and
    evaluations), each by its newest ``verifier`` verdict.

    Args:
        campaign: one campaign's name, or None for all campaigns (one row per campaign and prompt).
        min_share: least share of the prompt's samples, in (0, 1], on the majority answer.
        min_samples: least samples of the prompt (fewer cannot show a consensus).
        verifier: the verdicts' ``verifier`` column (``math``; older stores' ``composite`` verdicts count as math).

    Returns:
        Rows ``{campaign, prompt_id, question, gold, majority_answer, votes, samples, share,
        correct_samples, rounds, split}``, highest share first.

    Raises:
        ValueError: ``min_share`` not in (0, 1] or ``min_samples`` < 1.
    """
    if not 0.0 < min_share <= 1.0:
        raise ValueError(f"min_share ({min_share}) must be in (0, 1]; e.g. 0.75 flags prompts where 3 of 4 samples agree")
    if min_samples < 1:
        raise ValueError(f"min_samples ({min_samples}) must be >= 1")
    params = {"verifier": verifier, "campaign": campaign, "min_share": min_share, "min_samples": min_samples}
    return _rows(con.execute(GOLD_AUDIT_SQL, params))


# --- sweeps: one comparison row per campaign -------------------------------------------------------
SWEEP_SUMMARY_SQL = """
WITH c AS (SELECT name, campaign_id, base_checkpoint_id FROM campaigns WHERE list_contains($names, name)),
base AS (SELECT * FROM ({BASE_PASS1_SQL}) WHERE list_contains($names, name)),
rr AS (SELECT c.name, r.round_id, r.round_index, r.status, g.decision,
              CASE WHEN g.decision = 'promote' THEN g.candidate_pass1 ELSE g.incumbent_pass1 END AS kept_pass1,
              g.candidate_pass1
       FROM c JOIN rounds r USING (campaign_id) LEFT JOIN gate_decisions g USING (round_id)),
per_campaign AS (SELECT name, count(*) FILTER (WHERE status = 'completed') AS rounds_done,
                        count(*) FILTER (WHERE decision = 'promote') AS promotions,
                        arg_max(kept_pass1, round_index) FILTER (WHERE kept_pass1 IS NOT NULL) AS final_pass1,
                        max(candidate_pass1) AS best_candidate_pass1
                 FROM rr GROUP BY name),
kl AS (SELECT rr.name, avg(TRY_CAST(json_extract_string(tr.metrics_json, '$."train/kl/mean"') AS DOUBLE)) AS kl_mean
       FROM rr JOIN training_runs tr USING (round_id) GROUP BY rr.name),
v AS (SELECT trajectory_id, reward FROM verdicts
      QUALIFY row_number() OVER (PARTITION BY trajectory_id ORDER BY created_at DESC, verifier_version DESC) = 1),
rw AS (SELECT rr.name, avg(v.reward) AS reward_mean
       FROM rr JOIN trajectories t USING (round_id) JOIN v USING (trajectory_id) WHERE t.purpose = 'rollout' GROUP BY rr.name)
SELECT c.name AS campaign, coalesce(pc.rounds_done, 0) AS rounds_done, coalesce(pc.promotions, 0) AS promotions,
       base.base_pass1, pc.final_pass1, pc.best_candidate_pass1, kl.kl_mean, rw.reward_mean
FROM c LEFT JOIN base USING (name) LEFT JOIN per_campaign pc USING (name) LEFT JOIN kl USING (name) LEFT JOIN rw USING (name)
ORDER BY list_position($names, c.name)
""".replace("{BASE_PASS1_SQL}", BASE_PASS1_SQL)


def sweep_summary(con: duckdb.DuckDBPyConnection, names: list[str]) -> list[dict]:
    """One row per campaign in ``names`` (in that order; campaigns not in the store are absent).

    Each row: ``campaign``, ``rounds_done``, ``promotions``, ``base_pass1`` (held-out pass@1 of the base
    model), ``final_pass1`` (of the checkpoint the last gated round kept), ``best_candidate_pass1``,
    ``kl_mean`` (mean over training runs of ``train/kl/mean``, NULL when not GRPO) and ``reward_mean``
    (mean composite reward of all rollouts, newest verdicts); NULL where nothing was measured.
    """
    return _rows(con.execute(SWEEP_SUMMARY_SQL, {"names": names}))


def phase_rounds(con: duckdb.DuckDBPyConnection, campaign: str) -> list[dict]:
    """Per round of a campaign: ``{round_index, stage (its curriculum phase, rounds.stage), incumbent_checkpoint_id, candidate_checkpoint_id, decision,
    algorithm}`` (the training run's algorithm; None when nothing trained), in round order."""
    return _rows(
        con.execute(
            """SELECT r.round_index, r.stage, r.incumbent_checkpoint_id, g.candidate_checkpoint_id, g.decision,
                      (SELECT any_value(tr.algorithm) FROM training_runs tr WHERE tr.round_id = r.round_id) AS algorithm
               FROM rounds r JOIN campaigns c USING (campaign_id) LEFT JOIN gate_decisions g USING (round_id)
               WHERE c.name = ? ORDER BY r.round_index""",
            [campaign],
        )
    )


def campaign_phases(con: duckdb.DuckDBPyConnection, campaign: str) -> list[dict]:
    """The ``[[phases]]`` of a campaign's recorded settings: ``{name, algorithm, rounds}`` each (empty without phases).

    A campaign recorded before the rename holds them under ``stages``, their unnamed ones labelled ``stage-<n>``
    (as its rounds' ``rounds.stage`` are)."""
    row = con.execute("SELECT config_json FROM campaigns WHERE name = ?", [campaign]).fetchone()
    settings = json.loads(row[0]) if row else {}
    old = "phases" not in settings and "stages" in settings
    phases = settings.get("stages" if old else "phases") or []
    label = "stage" if old else "phase"
    return [
        {"name": s.get("name") or f"{label}-{i + 1}", "algorithm": s.get("algorithm"), "rounds": s.get("rounds", 1)}
        for i, s in enumerate(phases)
    ]
