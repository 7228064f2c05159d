"""What the gate's reward-hacking monitors read (a checkpoint's greedy evaluation completions with their verdicts and
golds) and what they store (``round_monitors``)."""

from __future__ import annotations

import duckdb

from ratchet.store.queries import _rows
from ratchet.store.read.round_metrics import IN_ROUNDS, by_round


def eval_completions(con: duckdb.DuckDBPyConnection, checkpoint_id: str, eval_set_id: str, verifier_version: str) -> list[dict]:
    """Per held-out prompt of the eval set: the checkpoint's greedy completion (text, ``completion_tokens``,
    ``finish_reason``) and its verdict under ``verifier_version`` (``correct``, ``format_ok``, ``reason``, ``parsed``),
    with the prompt's ``question`` and gold ``answer``; ordered by prompt id."""
    return _rows(
        con.execute(
            """SELECT t.prompt_id, t.completion, t.completion_tokens, t.finish_reason, v.correct, v.format_ok, v.reason,
                      v.parsed, p.question, p.answer
               FROM trajectories t JOIN verdicts v USING (trajectory_id) LEFT JOIN prompts p USING (prompt_id)
               WHERE t.checkpoint_id = ? AND t.eval_set_id = ? AND t.purpose = 'eval_greedy' AND v.verifier_version = ?
               QUALIFY row_number() OVER (PARTITION BY t.prompt_id ORDER BY t.sample_index) = 1
               ORDER BY t.prompt_id""",
            [checkpoint_id, eval_set_id, verifier_version],
        )
    )


def round_monitor_rows(con: duckdb.DuckDBPyConnection, round_id: str) -> list[dict]:
    """The round's stored monitors (``round_monitors``), by monitor name."""
    return round_monitor_rows_of_rounds(con, [round_id])[round_id]


def round_monitor_rows_of_rounds(con: duckdb.DuckDBPyConnection, round_ids: list[str]) -> dict[str, list[dict]]:
    """``round_monitor_rows`` of each of ``round_ids`` in one query: ``{round_id: rows}``."""
    sql = f"SELECT * FROM round_monitors WHERE {IN_ROUNDS} ORDER BY round_id, monitor"
    return by_round(con.execute(sql, {"round_ids": list(round_ids)}), round_ids, keep_round_id=True)
