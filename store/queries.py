"""Canned queries: the next round's training set, stored evaluations, campaign state.

Every function takes an open DuckDB connection (see ``store.db.connect``) and holds no state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import duckdb

from ratchet.store.events import apply_events, campaign_control, events_by_round


def _rows(cur) -> list[dict]:
    """A cursor's result as a list of ``{column: value}`` dicts."""
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


# A prompt that is, or asks the same normalized question as, any campaign's pinned evaluation prompt.
IS_EVAL_PROMPT = """EXISTS (SELECT 1 FROM eval_set_prompts e JOIN prompts ep ON ep.prompt_id = e.prompt_id
    WHERE ep.prompt_id = p.prompt_id OR ep.question_key = p.question_key)"""

# The training query. It can only ever see rollouts of the given round on TRAIN-split prompts that
# the round's verifier version judged correct and that ended on EOS; exact duplicate completions of
# a prompt are dropped and each prompt keeps at most `max_per_prompt` (lowest sample index first).
TRAINING_SET_SQL = """
WITH ok AS (
    SELECT t.trajectory_id, t.prompt_id, t.sample_index, t.completion, t.completion_token_ids, t.prompt_ids_hash,
           t.prompt_messages, p.question, p.source, v.read_chars, t.completion_mask,
           row_number() OVER (PARTITION BY t.prompt_id, trim(t.completion) ORDER BY t.sample_index) AS dup
    FROM trajectories t
    JOIN prompts p USING (prompt_id)
    JOIN verdicts v USING (trajectory_id)
    WHERE t.round_id = $round_id AND t.purpose = $purpose AND p.split = 'train'
      AND v.verifier_version = $verifier_version AND v.correct AND t.finish_reason IN ('stop', 'stop_string')
      AND NOT {NOT_EVAL}
), kept AS (
    SELECT *, row_number() OVER (PARTITION BY prompt_id ORDER BY sample_index) AS rank FROM ok WHERE dup = 1
)
SELECT trajectory_id, prompt_id, source, question, completion, completion_token_ids, prompt_ids_hash, prompt_messages,
       read_chars, completion_mask
FROM kept
WHERE rank <= $max_per_prompt ORDER BY prompt_id, sample_index
""".replace("{NOT_EVAL}", IS_EVAL_PROMPT)


def training_set(
    con: duckdb.DuckDBPyConnection, round_id: str, verifier_version: str, max_per_prompt: int, purpose: str = "rollout"
) -> list[dict]:
    """Rows ``{trajectory_id, prompt_id, source, question, completion, completion_token_ids, prompt_ids_hash,
    prompt_messages, read_chars, completion_mask}`` to fine-tune on this round (``read_chars``: the verifier's read span,
    NULL = all; ``completion_mask``: a multi-turn episode's 1 = model token, NULL = single-turn) (never an eval prompt); ``completion_token_ids`` and
    ``prompt_messages`` (the stored chat, JSON) are NULL for rows of an older store. ``purpose``: ``rollout``, or
    ``rationalization`` for the hinted rollouts of ``sft.rationalization`` (their stored chat carries the hint)."""
    params = {"round_id": round_id, "verifier_version": verifier_version, "max_per_prompt": max_per_prompt, "purpose": purpose}
    cur = con.execute(TRAINING_SET_SQL, params)
    return _rows(cur)


def rollout_groups(con: duckdb.DuckDBPyConnection, round_id: str, verifier_version: str, step: int = 0) -> list[dict]:
    """The train-split rollouts of one on-policy step of a round with their rewards, grouped by prompt (for GRPO).

    Rows ``{trajectory_id, prompt_id, source, question, completion, finish_reason, reward, completion_token_ids,
    sampler_logprobs, prompt_ids_hash, prompt_messages, read_chars, completion_mask}`` ordered by (prompt_id, sample_index) (the last four NULL for
    rows an older store wrote, or sampler_logprobs when not requested). Held-out and evaluation prompts are excluded like in
    ``training_set``.
    """
    cur = con.execute(
        f"""SELECT t.trajectory_id, t.prompt_id, p.source, p.question, t.completion, t.finish_reason, v.reward,
                  t.completion_token_ids, t.sampler_logprobs, t.prompt_ids_hash, t.prompt_messages, v.read_chars,
                  t.completion_mask
           FROM trajectories t JOIN prompts p USING (prompt_id) JOIN verdicts v USING (trajectory_id)
           WHERE t.round_id = ? AND t.purpose = 'rollout' AND p.split = 'train' AND v.verifier_version = ?
             AND coalesce(t.step, 0) = ? AND NOT {IS_EVAL_PROMPT}
           ORDER BY t.prompt_id, t.sample_index""",
        [round_id, verifier_version, step],
    )
    return _rows(cur)


def eval_outcomes(con: duckdb.DuckDBPyConnection, checkpoint_id: str, eval_set_id: str, verifier_version: str) -> list[dict]:
    """Per held-out prompt: greedy correct/answered, and (n, c) over eval samples, ordered by prompt_id."""
    rows = con.execute(
        """
        SELECT t.prompt_id,
               bool_or(t.purpose = 'eval_greedy' AND v.correct) AS greedy_correct,
               bool_or(t.purpose = 'eval_greedy' AND v.reason <> 'no_answer') AS greedy_answered,
               count(*) FILTER (WHERE t.purpose = 'eval_sample') AS n,
               count(*) FILTER (WHERE t.purpose = 'eval_sample' AND v.correct) AS c
        FROM trajectories t JOIN verdicts v USING (trajectory_id)
        WHERE t.checkpoint_id = ? AND t.eval_set_id = ?
          AND v.verifier_version = ?
        GROUP BY t.prompt_id ORDER BY t.prompt_id
        """,
        [checkpoint_id, eval_set_id, verifier_version],
    ).fetchall()
    return [dict(prompt_id=r[0], greedy_correct=bool(r[1]), greedy_answered=bool(r[2]), n=r[3], c=r[4]) for r in rows]


def stored_metrics(con: duckdb.DuckDBPyConnection, checkpoint_id: str, eval_set_id: str) -> dict[str, float]:
    """Metrics already computed for this checkpoint on this eval set (empty dict if none)."""
    rows = con.execute(
        "SELECT metric, value FROM evaluations WHERE checkpoint_id = ? AND eval_set_id = ?", [checkpoint_id, eval_set_id]
    ).fetchall()
    return dict(rows)


@dataclass(frozen=True)
class CampaignState:
    campaign_id: str
    base_checkpoint_id: str
    incumbent_checkpoint_id: str
    best_promoted_pass1: float | None
    consecutive_rejections: int
    halted: bool
    rounds_done: int
    paused: bool = False  # a person's `ratchet campaign pause` not yet lifted by a resume


def campaign_state(
    con: duckdb.DuckDBPyConnection, campaign_id: str, eval_set_id: str, before_round_index: int | None = None
) -> CampaignState:
    """Incumbent (last promoted, else base), best promoted held-out pass@1, trailing rejections; with
    ``before_round_index``, as they stood when that round's gate decided (``ratchet gate replay``)."""
    base = con.execute("SELECT base_checkpoint_id FROM campaigns WHERE campaign_id = ?", [campaign_id]).fetchone()
    if base is None:
        raise KeyError(f"no campaign {campaign_id}")
    decisions = con.execute(
        """SELECT g.decision, g.candidate_checkpoint_id, r.round_index FROM gate_decisions g JOIN rounds r USING (round_id)
           WHERE g.campaign_id = ? AND (CAST(? AS INTEGER) IS NULL OR r.round_index < ?) ORDER BY r.round_index""",
        [campaign_id, before_round_index, before_round_index],
    ).fetchall()
    incumbent, trailing, halted, paused = base[0], 0, False, False
    promoted = [base[0]]
    events = events_by_round(con, campaign_id)  # a person's halt / pause / resume, replayed in round order
    if before_round_index is not None:
        events = {i: e for i, e in events.items() if i < before_round_index}
    halted, paused, trailing = apply_events(events.pop(0, []), halted, paused, trailing)
    for decision, cand, index in decisions:
        if decision == "promote":
            incumbent, trailing = cand, 0
            promoted.append(cand)
        else:
            trailing += 1
            halted = halted or decision == "halt"
        halted, paused, trailing = apply_events(events.pop(index, []), halted, paused, trailing)
    for index in sorted(events):  # recorded after rounds whose decisions are gone: still in order
        halted, paused, trailing = apply_events(events[index], halted, paused, trailing)
    vals = con.execute(
        "SELECT max(value) FROM evaluations WHERE metric = 'heldout/pass@1' AND eval_set_id = ? AND list_contains(?, checkpoint_id)",
        [eval_set_id, promoted],
    ).fetchone()[0]
    done = con.execute("SELECT count(*) FROM rounds WHERE campaign_id = ? AND status = 'completed'", [campaign_id]).fetchone()[0]
    return CampaignState(campaign_id, base[0], incumbent, vals, trailing, halted, done, paused)


def campaign_ids(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The id of every campaign in the store (retired ones included)."""
    return {r[0] for r in con.execute("SELECT campaign_id FROM campaigns").fetchall()}


def retire_campaign(con: duckdb.DuckDBPyConnection, campaign_id: str, new_name: str, finished_at) -> None:
    """Rename a campaign that never completed a round to ``new_name`` (its rows stay, under their ids) and mark its
    rounds left ``running`` as ``crashed``, so the name can start afresh under another id (``ratchet run --reset``)."""
    con.execute("UPDATE campaigns SET name = ? WHERE campaign_id = ?", [new_name, campaign_id])
    con.execute(
        "UPDATE rounds SET status = 'crashed', finished_at = coalesce(finished_at, ?) WHERE campaign_id = ? AND status = 'running'",
        [finished_at, campaign_id],
    )


def campaign_by_name(con: duckdb.DuckDBPyConnection, name: str) -> dict | None:
    """The stored campaign ``name``: ids and its recorded settings (``config``; the curriculum under ``phases``, as a
    campaign recorded before the rename holds it under ``stages``), or None."""
    row = con.execute("SELECT campaign_id, base_checkpoint_id, config_json FROM campaigns WHERE name = ?", [name]).fetchone()
    if row is None:
        return None
    config = json.loads(row[2])
    if "stages" in config and "phases" not in config:
        config["phases"] = config.pop("stages")
    return {"campaign_id": row[0], "base_checkpoint_id": row[1], "config": config}


def pinned_eval_prompts(con: duckdb.DuckDBPyConnection, campaign_id: str) -> list[dict]:
    """The prompt rows a campaign evaluates on, in their pinned order (empty before the campaign pinned them)."""
    return _rows(
        con.execute(
            """SELECT p.* FROM eval_set_prompts e JOIN prompts p USING (prompt_id)
               WHERE e.campaign_id = ? ORDER BY e.position""",
            [campaign_id],
        )
    )


def last_evaluated_prompts(con: duckdb.DuckDBPyConnection, campaign_id: str) -> list[dict]:
    """Prompt rows of the eval set a campaign evaluated on last (ordered by prompt_id), for a store made before
    eval sets were pinned; empty when the campaign never evaluated."""
    return _rows(
        con.execute(
            """WITH last AS (SELECT t.eval_set_id FROM trajectories t JOIN rounds r USING (round_id)
                             WHERE r.campaign_id = ? AND t.eval_set_id IS NOT NULL ORDER BY t.created_at DESC LIMIT 1)
               SELECT p.* FROM prompts p WHERE p.prompt_id IN
                 (SELECT DISTINCT prompt_id FROM trajectories WHERE eval_set_id = (SELECT eval_set_id FROM last))
               ORDER BY p.prompt_id""",
            [campaign_id],
        )
    )


# Trajectories that have no verdict of `verifier_version` yet, with what re-scoring needs and the
# most recent earlier verdict (to count flips).
REVERIFY_SQL = """
SELECT t.trajectory_id, t.completion, t.finish_reason, t.messages, t.prompt_messages, p.answer, p.task_format, p.tests_json, p.solution, p.entry_point, p.source,
       p.record_json, c.config_json,
       prev.correct AS prev_correct, prev.verifier_version AS prev_version
FROM trajectories t
JOIN prompts p USING (prompt_id)
JOIN rounds r USING (round_id)
JOIN campaigns c USING (campaign_id)
LEFT JOIN (
    SELECT trajectory_id, correct, verifier_version,
           row_number() OVER (PARTITION BY trajectory_id ORDER BY created_at DESC) AS k
    FROM verdicts WHERE list_contains($verifiers, verifier)
) prev ON prev.trajectory_id = t.trajectory_id AND prev.k = 1
WHERE NOT EXISTS (SELECT 1 FROM verdicts v WHERE v.trajectory_id = t.trajectory_id
                  AND list_contains($verifiers, v.verifier) AND v.verifier_version = $version)
ORDER BY t.trajectory_id
"""


def trajectories_to_reverify(con: duckdb.DuckDBPyConnection, verifiers: list[str], version: str) -> list[dict]:
    """Trajectories with no verdict of ``version`` by any of ``verifiers`` (``math``, ``code``; ``composite`` before
    verdicts named their outcome verifier), with their prompt's gold, tests and campaign config."""
    cur = con.execute(REVERIFY_SQL, {"verifiers": verifiers, "version": version})
    return _rows(cur)


# --- rounds, checkpoints and reporting: small lookups the flows and the CLI need ------------------


def round_incumbent(con: duckdb.DuckDBPyConnection, round_id: str) -> str:
    """The incumbent a round started from (fixed when the round was first recorded)."""
    return con.execute("SELECT incumbent_checkpoint_id FROM rounds WHERE round_id = ?", [round_id]).fetchone()[0]


def set_round_status(
    con: duckdb.DuckDBPyConnection, round_id: str, status: str, *, finished_at=None, stage_seconds_json: str | None = None
) -> None:
    """Move a round to ``running`` / ``completed`` / ``failed``; a completed round never changes again."""
    con.execute(
        """UPDATE rounds SET status = ?, finished_at = coalesce(?, finished_at),
                   stage_seconds_json = coalesce(?, stage_seconds_json)
                   WHERE round_id = ? AND status <> 'completed'""",
        [status, finished_at, stage_seconds_json, round_id],
    )


def gate_decision(con: duckdb.DuckDBPyConnection, round_id: str) -> tuple[str, str] | None:
    """``(decision, reason)`` of a round, or None before its gate ran."""
    return con.execute("SELECT decision, reason FROM gate_decisions WHERE round_id = ?", [round_id]).fetchone()


def checkpoint_dir(con: duckdb.DuckDBPyConnection, checkpoint_id: str) -> str:
    """Folder of a checkpoint's weights.

    Raises:
        LookupError: no such checkpoint, or its weights were never written (``path`` NULL: an on-policy step's
            policy that a persistent round only pushed into its engine).
    """
    row = con.execute("SELECT path FROM checkpoints WHERE checkpoint_id = ?", [checkpoint_id]).fetchone()
    if row is None:
        raise LookupError(f"checkpoint {checkpoint_id} is not in the store")
    if row[0] is None:
        raise LookupError(
            f"checkpoint {checkpoint_id} has no saved weights (an on-policy step of a persistent GRPO round: its row "
            "names the policy for lineage only); load the round's candidate or incumbent instead"
        )
    return row[0]


# --- round report: the metrics behind the UI's round artifacts and `ratchet report` ---------------


# The verdict each trajectory is reported with: of `verifier_version` when given, else its newest one.
def verdict_cte(trajectories: str = "true", bounded: bool = False) -> str:
    """The CTE ``v``: each trajectory's verdict of ``$verifier_version``, or its newest verdict when that is NULL.

    ``trajectories``: a condition on the ``trajectories`` table (``round_id = $round_id``) scoping the verdicts it
    ranks: ranking every verdict of a 10M-row store takes ~2.7 s on 2 cores, one round's ~0.2 s (benchmarks/store_scale.py).
    ``bounded``: also only rows created at or after ``$since`` (a TIMESTAMPTZ, ``ratchet.store.read.round_metrics.since_of_rounds``, ``since_of``),
    which skips the older row groups of both tables.
    """
    after = " AND created_at >= CAST($since AS TIMESTAMPTZ)" if bounded else ""
    return f"""
v AS (SELECT * FROM verdicts
      WHERE (CAST($verifier_version AS VARCHAR) IS NULL OR verifier_version = $verifier_version){after}
        AND trajectory_id IN (SELECT trajectory_id FROM trajectories WHERE ({trajectories}){after})
      QUALIFY row_number() OVER (PARTITION BY trajectory_id ORDER BY created_at DESC, verifier_version DESC) = 1)"""


# --- crash detection: which process runs a round ---------------------------------------------------


def claim_round(con: duckdb.DuckDBPyConnection, round_id: str, owner: str, flow_run_id: str | None) -> None:
    """Record the ``'<host>:<pid>'`` process (and Prefect flow run) now running a round."""
    con.execute("UPDATE rounds SET owner = ?, flow_run_id = ? WHERE round_id = ?", [owner, flow_run_id, round_id])


def running_rounds(con: duckdb.DuckDBPyConnection) -> list[dict]:
    """Rounds in state ``running``: ``{round_id, campaign, round_index, owner, flow_run_id}``."""
    return _rows(
        con.execute("""SELECT r.round_id, c.name AS campaign, r.round_index, r.owner, r.flow_run_id
                                FROM rounds r JOIN campaigns c USING (campaign_id)
                                WHERE r.status = 'running' ORDER BY r.round_id""")
    )


def mark_rounds_crashed(con: duckdb.DuckDBPyConnection, round_ids: list[str], finished_at, status: str = "crashed") -> int:
    """Move these rounds from ``running`` to ``status`` (``crashed``: their process died; ``interrupted``: a signal
    stopped it); returns how many changed."""
    if not round_ids:
        return 0
    changed = con.execute(
        """UPDATE rounds SET status = ?, finished_at = coalesce(finished_at, ?)
                             WHERE status = 'running' AND list_contains(?, round_id) RETURNING round_id""",
        [status, finished_at, round_ids],
    ).fetchall()
    return len(changed)


def mark_rounds_interrupted(con: duckdb.DuckDBPyConnection, owner: str, finished_at) -> list[dict]:
    """Move the rounds ``owner`` (``'<host>:<pid>'``) runs from ``running`` to ``interrupted`` (a signal stopped that
    process; the next run resumes them as it resumes a crashed round); returns ``{round_id, campaign, round_index,
    flow_run_id}`` of each."""
    rows = [r for r in running_rounds(con) if r["owner"] == owner]
    mark_rounds_crashed(con, [r["round_id"] for r in rows], finished_at, status="interrupted")
    return rows


def eval_sample_verdicts(
    con: duckdb.DuckDBPyConnection, checkpoint_id: str, eval_set_id: str, verifier_version: str
) -> list[list[tuple[str | None, bool, float]]]:
    """Per held-out prompt (by prompt_id), its ``eval_sample`` completions' ``(parsed, correct, reward)`` in
    sample-index order: the input of ``loop.evaluation.sampled_metrics`` (maj@k, best-of-n, pass@k)."""
    rows = con.execute(
        """SELECT t.prompt_id, list((v.parsed, v.correct, v.reward) ORDER BY t.sample_index)
           FROM trajectories t JOIN verdicts v USING (trajectory_id)
           WHERE t.checkpoint_id = ? AND t.eval_set_id = ? AND t.purpose = 'eval_sample' AND v.verifier_version = ?
           GROUP BY t.prompt_id ORDER BY t.prompt_id""",
        [checkpoint_id, eval_set_id, verifier_version],
    ).fetchall()
    return [[(parsed, bool(correct), float(reward)) for parsed, correct, reward in samples] for _, samples in rows]


# --- nightly operation: what `ratchet status` says about each campaign --------------------------


def campaign_controls(con: duckdb.DuckDBPyConnection, names: list[str]) -> dict[str, dict]:
    """:func:`campaign_control` of each named campaign; a store from before events and manifests gives ``{}``."""
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if not {"campaign_events", "round_manifests"} <= tables:
        return {}
    out = {}
    for name in names:
        c = campaign_by_name(con, name)
        out[name] = campaign_control(con, c["campaign_id"], campaign_state(con, c["campaign_id"], ""))
    return out


def last_rollout_p90(con: duckdb.DuckDBPyConnection, campaign_id: str, round_index: int) -> float | None:
    """P90 (tokens, linear interpolation) of the rollout completion lengths of the campaign's latest round
    before ``round_index`` that has rollouts; None when no earlier round has any (the 'auto' length rule)."""
    row = con.execute(
        """SELECT quantile_cont(t.completion_tokens, 0.9) FROM trajectories t JOIN rounds r USING (round_id)
           WHERE t.purpose = 'rollout' AND r.round_index = (
               SELECT max(r2.round_index) FROM rounds r2 JOIN trajectories t2 USING (round_id)
               WHERE r2.campaign_id = $c AND r2.round_index < $i AND t2.purpose = 'rollout')
             AND r.campaign_id = $c""",
        {"c": campaign_id, "i": round_index},
    ).fetchone()
    return None if row is None or row[0] is None else float(row[0])


# --- the gate: per-set outcomes, promoted history, replay ------------------------------------------


def eval_set_members(con: duckdb.DuckDBPyConnection, campaign_id: str) -> dict[str, tuple[str, str]]:
    """``{prompt_id: (eval_name, source)}`` of a campaign's pinned evaluation prompts (empty before pinning)."""
    rows = con.execute(
        """SELECT e.prompt_id, e.eval_name, p.source FROM eval_set_prompts e JOIN prompts p USING (prompt_id)
           WHERE e.campaign_id = ? ORDER BY e.position""",
        [campaign_id],
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def promoted_before(con: duckdb.DuckDBPyConnection, campaign_id: str, round_index: int | None = None) -> list[str]:
    """The base and every checkpoint the campaign promoted (before round ``round_index`` when given), oldest first."""
    base = con.execute("SELECT base_checkpoint_id FROM campaigns WHERE campaign_id = ?", [campaign_id]).fetchone()
    if base is None:
        raise KeyError(f"no campaign {campaign_id}")
    rows = con.execute(
        """SELECT g.candidate_checkpoint_id FROM gate_decisions g JOIN rounds r USING (round_id)
           WHERE g.campaign_id = ? AND g.decision = 'promote' AND (CAST(? AS INTEGER) IS NULL OR r.round_index < ?)
           ORDER BY r.round_index""",
        [campaign_id, round_index, round_index],
    ).fetchall()
    return [base[0], *(r[0] for r in rows)]


def gate_history(con: duckdb.DuckDBPyConnection, campaign: str) -> list[dict]:
    """Every gate decision of a campaign in round order, with what it compared and the settings it ran with.

    Rows ``{round_index, round_id, campaign_id, incumbent_checkpoint_id, candidate_checkpoint_id, decision, reason,
    rule, settings_json, test, tolerance, verifier_version, config_json}`` (``config_json``: the campaign's stored
    settings, whose ``gate`` section holds the settings of decisions made before ``settings_json`` was recorded).
    """
    has = con.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = 'gate_decisions' AND column_name = 'settings_json'"
    ).fetchone()[0]
    extra = (
        "g.rule, g.settings_json, g.verifier_version, g.eval_set_id"
        if has
        else "NULL AS rule, NULL AS settings_json, NULL AS verifier_version, NULL AS eval_set_id"
    )
    return _rows(
        con.execute(
            f"""SELECT r.round_index, g.round_id, g.campaign_id, g.incumbent_checkpoint_id, g.candidate_checkpoint_id,
                       g.decision, g.reason, {extra}, g.test, g.tolerance, c.config_json
                FROM gate_decisions g JOIN rounds r USING (round_id) JOIN campaigns c ON c.campaign_id = g.campaign_id
                WHERE c.name = ? ORDER BY r.round_index""",
            [campaign],
        )
    )


def decision_inputs(con: duckdb.DuckDBPyConnection, row: dict) -> tuple[str, str] | None:
    """``(eval_set_id, verifier_version)`` a stored gate decision compared on: its recorded ones, else (decided before
    they were recorded) the eval set of the candidate's greedy evaluation and the oldest verdict version on it."""
    if row.get("eval_set_id") and row.get("verifier_version"):
        return row["eval_set_id"], row["verifier_version"]
    got = con.execute(
        """SELECT t.eval_set_id, min(v.verifier_version) FROM trajectories t JOIN verdicts v USING (trajectory_id)
           WHERE t.checkpoint_id = ? AND t.purpose = 'eval_greedy' GROUP BY t.eval_set_id
           ORDER BY min(t.created_at) LIMIT 1""",
        [row["candidate_checkpoint_id"]],
    ).fetchone()
    return None if got is None else (got[0], row.get("verifier_version") or got[1])


def measured_discordance(con: duckdb.DuckDBPyConnection, campaign: str | None = None) -> tuple[float, int, float] | None:
    """``(discordance, pairs, incumbent pass@1)`` over every stored gate decision (of ``campaign`` when given): the
    share of held-out prompts on which candidate and incumbent disagreed greedily (newest verdict of each trajectory),
    the number of paired prompts, and the incumbents' mean pass@1; None when nothing is paired."""
    row = con.execute(
        f"""WITH {verdict_cte("purpose = 'eval_greedy'")},
            o AS (SELECT t.checkpoint_id, t.eval_set_id, t.prompt_id, bool_or(v.correct) AS ok
                  FROM trajectories t JOIN v USING (trajectory_id) WHERE t.purpose = 'eval_greedy' GROUP BY ALL)
            SELECT avg((a.ok <> b.ok)::INT), count(*), avg(b.ok::INT)
            FROM gate_decisions g JOIN campaigns c USING (campaign_id)
            JOIN o a ON a.checkpoint_id = g.candidate_checkpoint_id
            JOIN o b ON b.checkpoint_id = g.incumbent_checkpoint_id AND b.eval_set_id = a.eval_set_id AND b.prompt_id = a.prompt_id
            WHERE CAST($campaign AS VARCHAR) IS NULL OR c.name = $campaign""",
        {"verifier_version": None, "campaign": campaign},
    ).fetchone()
    return None if not row or not row[1] else (float(row[0]), int(row[1]), float(row[2]))
