"""A campaign's confirmation set (``confirmation_prompts``): its pinned prompts, and each promoted round's confirmed
pass@1 (``gate_decisions.confirmed_pass1``) for ``ratchet status``."""

from __future__ import annotations

import duckdb

from ratchet.store.queries import _rows


def pinned_confirmation_prompts(con: duckdb.DuckDBPyConnection, campaign_id: str) -> list[dict]:
    """The prompt rows of the campaign's confirmation set in their pinned order (empty before it pinned them)."""
    return _rows(
        con.execute(
            """SELECT p.* FROM confirmation_prompts c JOIN prompts p USING (prompt_id)
               WHERE c.campaign_id = ? ORDER BY c.position""",
            [campaign_id],
        )
    )


def confirmed_by_round(con: duckdb.DuckDBPyConnection) -> dict[str, float]:
    """``{round_id: confirmed pass@1}`` of every promoted round whose candidate was read on its confirmation set."""
    return dict(con.execute("SELECT round_id, confirmed_pass1 FROM gate_decisions WHERE confirmed_pass1 IS NOT NULL").fetchall())
