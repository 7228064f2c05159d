"""Campaign events: halts, pauses and resumes a person (or the daemon) records, with who, when and why.

The campaign's state is replayed from its gate decisions and these events in round order: an event
recorded after N gated rounds applies before round N+1. ``halt`` and ``pause`` stop new rounds;
``resume`` lifts both and restarts the count of consecutive rejections, so the gate does not halt
again on the very next rejection. A resume may change settings (``settings_json`` = ``{"set":
{"grpo.lr": 3e-6}}``): rounds after it run with them, and only those settings may differ from the
campaign's stored ones (``recorded_settings``).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import socket
from datetime import UTC, datetime

import duckdb

from ratchet.store.ingest import insert_rows

ACTIONS = ("halt", "pause", "resume")


def actor() -> str:
    """``<user>@<host>`` of this process."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def gated_rounds(con: duckdb.DuckDBPyConnection, campaign_id: str) -> int:
    """Highest round index with a gate decision (0 before the first)."""
    row = con.execute(
        "SELECT max(r.round_index) FROM gate_decisions g JOIN rounds r USING (round_id) WHERE g.campaign_id = ?", [campaign_id]
    ).fetchone()
    return row[0] or 0


def record_event(
    con: duckdb.DuckDBPyConnection, campaign_id: str, action: str, reason: str, *, settings: dict | None = None
) -> dict:
    """Insert one event and return it as a row dict.

    Raises:
        ValueError: ``action`` is not one of :data:`ACTIONS`, or ``reason`` is empty.
    """
    if action not in ACTIONS:
        raise ValueError(f"campaign event {action!r} is not one of {', '.join(ACTIONS)}")
    if not reason.strip():
        raise ValueError(f'a {action} needs a reason a person can read later; pass --reason "..."')
    created = datetime.now(UTC).replace(tzinfo=None)
    who = actor()
    row = dict(
        event_id=hashlib.sha256(f"{campaign_id}|{action}|{created.isoformat()}|{who}".encode()).hexdigest()[:16],
        campaign_id=campaign_id,
        action=action,
        reason=reason.strip(),
        actor=who,
        after_round_index=gated_rounds(con, campaign_id),
        settings_json=json.dumps(settings, sort_keys=True) if settings else None,
        created_at=created,
    )
    insert_rows(con, "campaign_events", [row])
    return row


def campaign_events(con: duckdb.DuckDBPyConnection, campaign_id: str) -> list[dict]:
    """The campaign's events, oldest first; ``changes`` is what a resume set, as ``"grpo.lr=3e-06"`` text ("" if none)."""
    cur = con.execute("SELECT * FROM campaign_events WHERE campaign_id = ? ORDER BY created_at, event_id", [campaign_id])
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    for e in rows:
        changed = json.loads(e["settings_json"]).get("set", {}) if e.get("settings_json") else {}
        e["changes"] = ", ".join(f"{k}={v}" for k, v in changed.items())
    return rows


def recorded_settings(con: duckdb.DuckDBPyConnection, campaign_id: str) -> dict[str, object]:
    """Dotted settings changed by the campaign's resume events, later events winning: ``{"grpo.lr": 3e-6}``."""
    out: dict[str, object] = {}
    for e in campaign_events(con, campaign_id):
        if e.get("settings_json"):
            out.update(json.loads(e["settings_json"]).get("set", {}))
    return out


def events_by_round(con: duckdb.DuckDBPyConnection, campaign_id: str) -> dict[int, list[str]]:
    """``{after_round_index: [action, ...]}`` in the order they were recorded."""
    out: dict[int, list[str]] = {}
    for e in campaign_events(con, campaign_id):
        out.setdefault(e["after_round_index"], []).append(e["action"])
    return out


def apply_events(actions: list[str], halted: bool, paused: bool, trailing: int) -> tuple[bool, bool, int]:
    """The state ``(halted, paused, consecutive rejections)`` after ``actions`` in order."""
    for a in actions:
        if a == "halt":
            halted = True
        elif a == "pause":
            paused = True
        else:  # resume
            halted, paused, trailing = False, False, 0
    return halted, paused, trailing


def campaign_control(con: duckdb.DuckDBPyConnection, campaign_id: str, state) -> dict:
    """What ``ratchet status`` says about a campaign's progress: rounds done, max_rounds, and why it is not running.

    ``state``: its :class:`ratchet.store.queries.CampaignState`. ``not_running`` is ``None`` when the next
    scheduled run will start a round, else ``'halted: <why>'``, ``'paused: <why>'`` or ``'max reached'``.
    """
    events = campaign_events(con, campaign_id)
    run = con.execute(
        """SELECT m.run_settings_json FROM round_manifests m JOIN rounds r USING (round_id)
           WHERE r.campaign_id = ? ORDER BY r.round_index DESC LIMIT 1""",
        [campaign_id],
    ).fetchone()
    max_rounds = json.loads(run[0]).get("max_rounds") if run and run[0] else None
    last_stop = next((e for e in reversed(events) if e["action"] in ("halt", "pause")), None)
    why = None
    if state.halted:
        gate = con.execute(
            """SELECT g.reason FROM gate_decisions g JOIN rounds r USING (round_id)
               WHERE g.campaign_id = ? AND g.decision = 'halt' ORDER BY r.round_index DESC LIMIT 1""",
            [campaign_id],
        ).fetchone()
        manual = last_stop is not None and last_stop["action"] == "halt"
        why = "halted: " + (f"{last_stop['reason']} ({last_stop['actor']})" if manual else (gate[0] if gate else "gate"))
    elif state.paused:
        why = f"paused: {last_stop['reason']} ({last_stop['actor']})" if last_stop else "paused"
    elif max_rounds is not None and state.rounds_done >= max_rounds:
        why = "max reached"
    return {
        "rounds_done": state.rounds_done,
        "max_rounds": max_rounds,
        "not_running": why,
        "events": [
            {k: (str(v) if k == "created_at" else v) for k, v in e.items() if k not in ("event_id", "campaign_id")}
            for e in events
        ],
    }


def events_of(con: duckdb.DuckDBPyConnection, name: str) -> list[dict]:
    """The events of the campaign called ``name``, oldest first; [] for a store made before events existed."""
    has = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'campaign_events'").fetchone()[0]
    if not has:
        return []
    row = con.execute("SELECT campaign_id FROM campaigns WHERE name = ?", [name]).fetchone()
    return campaign_events(con, row[0]) if row else []
