"""Rows for ``ratchet export``: a round's (or a campaign's) training set, rollouts with verdicts, or eval outcomes.

Each query returns one row per trajectory with its prompt (question, gold answer, task, split), the newest verdict,
the prompt's length in tokens as the engine counted it (``prompt_tokens``) and the exact chat the engine was given
(``prompt_messages``, JSON; NULL in a store from before chats were stored) and, for a multi-turn episode, its
``turns`` and ``episode_messages`` (the turns after that chat, JSON); the caller turns them into the exported
``messages`` (the whole episode as chat messages) and rendered ``text`` (it needs the tokenizer).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

WHATS = ("training-set", "rollouts", "evals")

_NEWEST_VERDICT = """v AS (SELECT * FROM verdicts
      QUALIFY row_number() OVER (PARTITION BY trajectory_id ORDER BY created_at DESC, verifier_version DESC) = 1)"""

_COLUMNS = """r.round_index, t.round_id, t.trajectory_id, t.prompt_id, p.source, p.task, p.split, p.question, p.answer,
       t.prompt_messages, t.prompt_tokens, t.completion, t.checkpoint_id, t.purpose, t.sample_index, t.step, t.temperature, t.seed, t.finish_reason,
       t.completion_tokens, coalesce(t.turns, 1) AS turns, t.messages AS episode_messages, v.correct, v.reward,
       v.reason AS verdict_reason, v.verifier_version"""

_SQL = {
    # What each round's training run consumed (training_examples), with the checkpoint it produced.
    "training-set": f"""WITH {_NEWEST_VERDICT}
        SELECT {_COLUMNS}, tr.training_run_id, tr.algorithm, tr.output_checkpoint_id
        FROM training_examples te JOIN training_runs tr USING (training_run_id)
        JOIN trajectories t USING (trajectory_id) JOIN prompts p USING (prompt_id)
        JOIN rounds r ON r.round_id = tr.round_id LEFT JOIN v USING (trajectory_id)
        WHERE r.campaign_id = $campaign_id AND ($round IS NULL OR r.round_index = $round)
        ORDER BY r.round_index, tr.training_run_id, t.trajectory_id""",
    "rollouts": f"""WITH {_NEWEST_VERDICT}
        SELECT {_COLUMNS}
        FROM trajectories t JOIN prompts p USING (prompt_id) JOIN rounds r USING (round_id) LEFT JOIN v USING (trajectory_id)
        WHERE t.purpose = 'rollout' AND r.campaign_id = $campaign_id AND ($round IS NULL OR r.round_index = $round)
        ORDER BY r.round_index, t.trajectory_id""",
    # Held-out outcomes per evaluated checkpoint (greedy and sampled), from the round that computed them.
    "evals": f"""WITH {_NEWEST_VERDICT}
        SELECT {_COLUMNS}, t.eval_set_id
        FROM trajectories t JOIN prompts p USING (prompt_id) JOIN rounds r USING (round_id) LEFT JOIN v USING (trajectory_id)
        WHERE t.purpose LIKE 'eval%' AND r.campaign_id = $campaign_id AND ($round IS NULL OR r.round_index = $round)
        ORDER BY r.round_index, t.checkpoint_id, t.trajectory_id""",
}


def export_table(con: duckdb.DuckDBPyConnection, campaign: str, what: str, round_index: int | None = None) -> pa.Table:
    """The rows of ``what`` for ``campaign`` (one round when ``round_index`` is given) as an Arrow table.

    Raises:
        ValueError: ``what`` is not one of :data:`WHATS`, the campaign is not in the store, or the round is not.
    """
    if what not in WHATS:
        raise ValueError(f"--what {what!r} is not one of {', '.join(WHATS)}")
    rows = con.execute("SELECT campaign_id FROM campaigns WHERE name = ?", [campaign]).fetchall()  # the result finished
    row = rows[0] if rows else None
    if row is None:
        names = [r[0] for r in con.execute("SELECT name FROM campaigns ORDER BY name").fetchall()]
        raise ValueError(f"no campaign {campaign!r} in the store; campaigns: {', '.join(names) or 'none'}")
    if round_index is not None:
        rounds = [
            r[0] for r in con.execute("SELECT round_index FROM rounds WHERE campaign_id = ? ORDER BY 1", [row[0]]).fetchall()
        ]
        if round_index not in rounds:
            raise ValueError(f"campaign {campaign!r} has no round {round_index}; its rounds: {rounds or 'none'}")
    return con.sql(_SQL[what], params={"campaign_id": row[0], "round": round_index}).to_arrow_table()  # no extra copy


def campaign_config_json(con: duckdb.DuckDBPyConnection, campaign: str) -> str:
    """The campaign's stored settings (JSON text)."""
    return con.execute("SELECT config_json FROM campaigns WHERE name = ?", [campaign]).fetchone()[0]
