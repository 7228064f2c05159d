"""A campaign's held-out slices beside its gating set: the confirmation slices (``confirmation_prompts``, one per eval
set), each promoted round's confirmed pass@1 (``gate_decisions.confirmed_pass1``, per set in
``gate_set_decisions.confirmed_pass1``), and the refreshed gating slices (``eval_set_versions``, gate.refresh_after)."""

from __future__ import annotations

import json

import duckdb

from ratchet.store.ingest import insert_rows
from ratchet.store.queries import _rows


def pinned_confirmation_prompts(con: duckdb.DuckDBPyConnection, campaign_id: str) -> list[dict]:
    """The prompt rows of the campaign's confirmation slices in their pinned order, each with its ``eval_name``
    ('heldout' for rows pinned before per-set slices); empty before it pinned them."""
    return _rows(
        con.execute(
            """SELECT p.*, coalesce(c.eval_name, 'heldout') AS eval_name FROM confirmation_prompts c
               JOIN prompts p USING (prompt_id) WHERE c.campaign_id = ? ORDER BY c.position""",
            [campaign_id],
        )
    )


def confirmed_by_round(con: duckdb.DuckDBPyConnection) -> dict[str, float]:
    """``{round_id: confirmed pass@1}`` of every promoted round whose candidate was read on its confirmation set."""
    return dict(con.execute("SELECT round_id, confirmed_pass1 FROM gate_decisions WHERE confirmed_pass1 IS NOT NULL").fetchall())


def confirmed_by_set(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, dict]]:
    """``{round_id: {eval set name: {"candidate_pass1", "confirmed_pass1"}}}`` (the gating score beside the confirmed
    one) of every promoted round read on per-set confirmation slices; empty for a store older than the column."""
    has = "SELECT count(*) FROM information_schema.columns WHERE table_name = 'gate_set_decisions' AND column_name = ?"
    if not con.execute(has, ["confirmed_pass1"]).fetchone()[0]:
        return {}
    out: dict[str, dict[str, dict]] = {}
    sql = """SELECT round_id, eval_name, candidate_pass1, confirmed_pass1 FROM gate_set_decisions
             WHERE confirmed_pass1 IS NOT NULL ORDER BY round_id, eval_name"""
    for round_id, name, cand, conf in con.execute(sql).fetchall():
        out.setdefault(round_id, {})[name] = {"candidate_pass1": cand, "confirmed_pass1": conf}
    return out


def eval_set_versions(con: duckdb.DuckDBPyConnection, campaign_id: str) -> list[dict]:
    """The campaign's gating-slice refreshes (``eval_set_versions`` rows), oldest first."""
    return _rows(con.execute("SELECT * FROM eval_set_versions WHERE campaign_id = ? ORDER BY version", [campaign_id]))


def used_heldout_ids(con: duckdb.DuckDBPyConnection, campaign_id: str) -> set[str]:
    """Every held-out prompt id the campaign pinned: its gating slice now, every slice a refresh retired, and its
    confirmation slices. A fresh slice is drawn from outside these (never gated on, never confirmed on)."""
    ids = {r[0] for r in con.execute("SELECT prompt_id FROM eval_set_prompts WHERE campaign_id = ?", [campaign_id]).fetchall()}
    ids |= {
        r[0] for r in con.execute("SELECT prompt_id FROM confirmation_prompts WHERE campaign_id = ?", [campaign_id]).fetchall()
    }
    for v in eval_set_versions(con, campaign_id):
        ids |= set(json.loads(v["replaced_prompt_ids_json"]))
    return ids


def replace_gating_slice(con: duckdb.DuckDBPyConnection, campaign_id: str, rows: list[dict], version: dict) -> None:
    """Pin ``rows`` (``eval_set_prompts`` rows) as the campaign's eval set in place of the current one, and record the
    ``eval_set_versions`` row ``version``; in the caller's transaction, so both land or neither."""
    con.execute("DELETE FROM eval_set_prompts WHERE campaign_id = ?", [campaign_id])
    insert_rows(con, "eval_set_prompts", rows)
    insert_rows(con, "eval_set_versions", [version])
