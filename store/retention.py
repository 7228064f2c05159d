"""Retention: which checkpoints' weights may go once their round's gate decided (rows always stay).

Kept: the campaign's base, its incumbent (last promoted), its best-ever promoted checkpoint (highest
held-out pass@1) and the last ``keep_last_promoted`` promoted ones. Deleted: every rejected (or halted)
candidate and every intermediate on-policy step checkpoint of a gated round. Rows whose weights were never
written (``path`` NULL: a persistent round's intermediate steps) have nothing to delete and are skipped. Checkpoints of a round
whose gate has not decided are never touched (a running or crashed round may still need them), and
no folder outside the run directory's ``checkpoints/`` is ever deleted (the base model's folder).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb


@dataclass(frozen=True)
class Doomed:
    checkpoint_id: str
    path: str
    round_index: int
    why: str  # "rejected candidate" | "intermediate step" | "older promoted"
    bytes: int


def folder_bytes(path: str | Path) -> int:
    """Bytes of the files under ``path`` (0 when it is gone; a file deleted while it is summed counts 0)."""
    total = 0
    try:
        for f in Path(path).rglob("*"):
            try:
                total += f.stat().st_size if f.is_file() else 0
            except FileNotFoundError:
                pass
    except FileNotFoundError:
        pass
    return total


def _kept(con: duckdb.DuckDBPyConnection, campaign_id: str, keep_last_promoted: int) -> set[str]:
    base = con.execute("SELECT base_checkpoint_id FROM campaigns WHERE campaign_id = ?", [campaign_id]).fetchone()[0]
    promoted = [
        r[0]
        for r in con.execute(
            """SELECT g.candidate_checkpoint_id FROM gate_decisions g JOIN rounds r USING (round_id)
               WHERE g.campaign_id = ? AND g.decision = 'promote' ORDER BY r.round_index""",
            [campaign_id],
        ).fetchall()
    ]
    best = con.execute(
        "SELECT checkpoint_id FROM evaluations WHERE metric = 'heldout/pass@1' AND list_contains(?, checkpoint_id) "
        "ORDER BY value DESC, created_at LIMIT 1",
        [promoted],
    ).fetchone()
    keep = {base, *promoted[-max(keep_last_promoted, 1) :]}  # the incumbent is the last promoted
    return keep | ({best[0]} if best else set())


def retention_plan(
    con: duckdb.DuckDBPyConnection, campaign_id: str, checkpoints_root: str | Path, keep_last_promoted: int = 2
) -> list[Doomed]:
    """The checkpoints of ``campaign_id`` whose weights the policy deletes now (not yet deleted, under ``checkpoints_root``)."""
    root = Path(checkpoints_root).resolve()
    keep = _kept(con, campaign_id, keep_last_promoted)
    rows = con.execute(
        """SELECT DISTINCT c.checkpoint_id, c.path, r.round_index, g.decision, g.candidate_checkpoint_id
           FROM training_runs tr JOIN rounds r ON r.round_id = tr.round_id
           JOIN gate_decisions g ON g.round_id = tr.round_id
           JOIN checkpoints c ON c.checkpoint_id = tr.output_checkpoint_id
           WHERE r.campaign_id = ? AND c.deleted_at IS NULL AND c.path IS NOT NULL ORDER BY r.round_index, c.checkpoint_id""",
        [campaign_id],
    ).fetchall()
    out = []
    for cid, path, index, decision, candidate in rows:
        if cid in keep or not Path(path).resolve().is_relative_to(root):
            continue
        why = "intermediate step" if cid != candidate else "older promoted" if decision == "promote" else "rejected candidate"
        out.append(Doomed(cid, path, index, why, folder_bytes(path)))
    return out


def apply_plan(con: duckdb.DuckDBPyConnection, plan: list[Doomed]) -> int:
    """Delete each planned checkpoint's folder and set its row's ``deleted_at``; returns bytes freed."""
    freed = 0
    when = datetime.now(UTC).replace(tzinfo=None)
    for d in plan:
        shutil.rmtree(d.path, ignore_errors=True)
        freed += d.bytes
        con.execute("UPDATE checkpoints SET deleted_at = ? WHERE checkpoint_id = ?", [when, d.checkpoint_id])
    return freed


def stage_files(round_dir: str | Path) -> list[Path]:
    """A gated round's stage Parquet files and generation shards (ingested into the store; markers and reports stay)."""
    rd = Path(round_dir)
    return sorted(p for p in rd.rglob("*.parquet") if "report" not in p.relative_to(rd).parts) if rd.exists() else []


class DiskSpaceError(RuntimeError):
    """Too little free disk for the next round; the message says how much is needed and what to free."""


def round_write_bytes(weights_bytes: int, steps: int, optimizer_states: bool) -> int:
    """What one round writes at most before its gate: one checkpoint per on-policy step, plus the AdamW
    moments (2x the weights) a multi-step round hands from step to step, plus 10% for stage files and logs."""
    per_step = weights_bytes * (3 if optimizer_states else 1)
    return int(1.1 * per_step * max(steps, 1))


def check_free_disk(folder: str | Path, needed_bytes: int) -> None:
    """Raise :class:`DiskSpaceError` in one line when ``folder``'s filesystem has less than ``needed_bytes`` free."""
    p = Path(folder)
    while not p.exists():
        p = p.parent
    free = shutil.disk_usage(p).free
    if free < needed_bytes:
        raise DiskSpaceError(
            f"{free / 1e9:.2f} GB free under {folder}, the next round writes up to {needed_bytes / 1e9:.2f} GB; "
            "free disk (`ratchet gc`, lower retention.keep_last_promoted) or move run_dir"
        )
