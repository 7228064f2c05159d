"""What a campaign's rounds cost and what the promotions bought: tokens generated, compute seconds and wall time per
round, and per point of promoted pass@1 (``ratchet status`` and ``ratchet report``)."""

from __future__ import annotations

import json

import duckdb

from ratchet.store.queries import _rows


def round_costs(con: duckdb.DuckDBPyConnection, campaign: str) -> list[dict]:
    """One row per round of ``campaign``: ``tokens`` (completion tokens of every trajectory the round generated:
    rollouts and the evaluations it computed), ``compute_s`` (the stage markers' compute seconds, summed), ``wall_s``
    (started -> finished; None while running), ``decision`` and ``promoted_points`` (100 x the pass@1 change of a
    promotion, else 0)."""
    rows = _rows(
        con.execute(
            """SELECT r.round_id, r.round_index, r.stage_seconds_json, epoch(r.finished_at) - epoch(r.started_at) AS wall_s,
                      g.decision, g.delta,
                      (SELECT coalesce(sum(t.completion_tokens), 0) FROM trajectories t WHERE t.round_id = r.round_id) AS tokens
               FROM rounds r JOIN campaigns c USING (campaign_id) LEFT JOIN gate_decisions g USING (round_id)
               WHERE c.name = ? ORDER BY r.round_index""",
            [campaign],
        )
    )
    for r in rows:
        seconds = json.loads(r.pop("stage_seconds_json") or "{}")
        r["compute_s"] = float(sum(v for v in seconds.values() if isinstance(v, int | float)))
        r["promoted_points"] = 100.0 * r["delta"] if r["decision"] == "promote" and r["delta"] is not None else 0.0
        r["tokens"] = int(r["tokens"])
    return rows


def cost_per_point(rows: list[dict]) -> dict:
    """A campaign's totals over ``round_costs`` rows and their cost per point of promoted pass@1 (None without a
    positive promoted gain): ``tokens``, ``compute_s``, ``wall_s``, ``promoted_points``, ``tokens_per_point``,
    ``compute_s_per_point``, ``wall_s_per_point``."""
    total = {k: float(sum(r[k] or 0 for r in rows)) for k in ("tokens", "compute_s", "wall_s", "promoted_points")}
    pts = total["promoted_points"]
    per = {f"{k}_per_point": (total[k] / pts if pts > 0 else None) for k in ("tokens", "compute_s", "wall_s")}
    return {**total, "rounds": len(rows), **per}


def tokens_since(con: duckdb.DuckDBPyConnection, round_id: str, since) -> int:
    """Completion tokens of the round's trajectories created at or after ``since`` (a datetime): one attempt's."""
    row = con.execute(
        "SELECT coalesce(sum(completion_tokens), 0) FROM trajectories WHERE round_id = ? AND created_at >= ?", [round_id, since]
    ).fetchone()
    return int(row[0])
