"""``ratchet status``: campaigns, their rounds, states, gate decisions and prompt selection (a table or JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ratchet.flows.cli.common import DB_HELP, cell, console, fail, plain_table
from ratchet.flows.settings import configure_prefect


def status(
    db: Path = typer.Option(Path("ratchet.duckdb"), "--db", help=DB_HELP),
    format: str = typer.Option("table", "--format", help="table | json"),
) -> None:
    """Campaigns, their rounds, states and gate decisions."""
    from ratchet.flows.report.picks import selection_line, selection_rows
    from ratchet.flows.rounds.observe.progress import describe_stage, running_stage
    from ratchet.store.confirmation import confirmed_by_round, confirmed_by_set
    from ratchet.store.db import StoreError, connect, require_store
    from ratchet.store.queries import campaign_controls
    from ratchet.store.read.costs import cost_per_point, round_costs
    from ratchet.store.read.reports import round_run_dirs, status_rows

    if format not in ("table", "json"):
        fail(f"--format {format!r} is not one of table, json")
    from ratchet.flows.daemon.service import owner_alive

    try:
        with connect(db, read_only=True) as con:
            require_store(con, db)
            names, rounds = status_rows(con)
            control = campaign_controls(con, names)
            picked = {n: {r["round_index"]: r for r in selection_rows(con, n)} for n in names}
            run_dirs = round_run_dirs(con)
            costs = {n: {r["round_index"]: r for r in round_costs(con, n)} for n in names}
            confirmed = confirmed_by_round(con) if _has_column(con, "gate_decisions", "confirmed_pass1") else {}
            confirmed_sets = confirmed_by_set(con)
    except StoreError as e:
        fail(str(e))
    for r in rounds:  # a round whose process is gone (e.g. SIGKILL) is crashed, whether or not a daemon marked it yet
        if r["status"] == "running" and not owner_alive(r["owner"]):
            r["status"] = "crashed"
        run_dir = Path(run_dirs.get(r["round_id"]) or Path(db).with_suffix(".runs"))
        r["stage"] = running_stage(run_dir / r["campaign"] / f"round-{r['round_index']}") if r["status"] == "running" else None
    from ratchet.flows.daemon.schedules import next_run_by_campaign

    configure_prefect()
    nxt = next_run_by_campaign(timeout_s=1.0)  # {} without a reachable daemon API
    doc = {
        "campaigns": [
            {
                "name": name,
                "next_run": nxt.get(name),
                "cost": cost_per_point(list(costs[name].values())),  # totals and per point of promoted pass@1
                **control.get(name, {}),  # rounds_done, max_rounds, not_running (why), events
                "rounds": [
                    {
                        "index": r["round_index"],
                        "state": r["status"],
                        "stage": r["stage"],  # a running round's stage and its progress (None otherwise)
                        "decision": r["decision"],
                        "reason": r["reason"],
                        "candidate_pass1": r["candidate_pass1"],
                        "confirmed_pass1": confirmed.get(r["round_id"]),  # the confirmation set's, on promotion
                        "confirmed_sets": confirmed_sets.get(r["round_id"]),  # per eval set, beside its gating score
                        "incumbent_pass1": r["incumbent_pass1"],
                        "selection": _selection_doc(picked[name].get(r["round_index"])),
                        **_cost_doc(costs[name].get(r["round_index"])),
                    }
                    for r in rounds
                    if r["campaign"] == name
                ],
            }
            for name in names
        ]
    }
    if format == "json":
        print(json.dumps(doc, indent=1))
        return
    # the confirmation set's column only where one was read (gate.confirmation_prompts): the table stays narrow enough
    # for a running stage's progress to show whole
    confirmed = any(r.get("confirmed_pass1") is not None for c in doc["campaigns"] for r in c["rounds"])
    cols = (
        "campaign",
        "round",
        "state",
        "decision",
        "candidate pass@1",
        *(("confirmed pass@1",) * confirmed),
        "incumbent pass@1",
    )
    t = plain_table(*cols, title=f"Ratchet store {db}")
    for c in doc["campaigns"]:
        for r in c["rounds"] or [{"index": "—", "state": "", "decision": None, "candidate_pass1": None, "incumbent_pass1": None}]:
            f = lambda x: "—" if x is None else f"{x:.3f}"  # noqa: E731
            state = f"{r['state']} ({describe_stage(r['stage'])})" if r.get("stage") else r["state"]
            values = [c["name"], r["index"], state, r["decision"] or "", f(r["candidate_pass1"]),
                      *((f(r.get("confirmed_pass1")),) * confirmed), f(r["incumbent_pass1"])]  # fmt: skip
            t.add_row(*map(cell, values))
    console.print(t)
    for c in doc["campaigns"]:
        done = f"{c.get('rounds_done', 0)}/{c.get('max_rounds') or 'unlimited'} rounds done"
        nxt_run = f"next scheduled run {c['next_run']}" if c["next_run"] else "no scheduled run"
        why = f"; not running: {c['not_running']}" if c.get("not_running") else ""
        console.print(f"{c['name']}: {done}, {nxt_run}{why}", highlight=False)
        console.print(f"  {cost_line(c['cost'])}", highlight=False)
        for r in c["rounds"][-STATUS_SELECTION_ROUNDS:]:  # --format json has every round's
            if r.get("confirmed_sets") and len(r["confirmed_sets"]) > 1:
                console.print(f"  {confirmed_line(r['index'], r['confirmed_sets'])}", highlight=False)
            if r.get("selection"):
                console.print(f"  {selection_line({'round_index': r['index'], **r['selection']})}", highlight=False)
        for e in c.get("events", [])[-3:]:
            changes = f" (from round {e['after_round_index'] + 1}: {e['changes']})" if e.get("changes") else ""
            when = e["created_at"]
            when = when.isoformat(sep=" ", timespec="seconds") if hasattr(when, "isoformat") else when
            console.print(f"  {when} {e['action']} by {e['actor']}: {e['reason']}{changes}", highlight=False)


STATUS_SELECTION_ROUNDS = 5  # the last rounds whose prompt selection the status table prints
_SELECTION_KEYS = ("selection", "groups", "zero_variance_groups", "zero_variance_share", "tokens", "zero_variance_tokens",
                   "zero_variance_token_share", "drawn", "refilled", "pass_rate_histogram")  # fmt: skip


def _selection_doc(r: dict | None) -> dict | None:
    """A round's prompt-selection figures for ``ratchet status`` (``flows.report.selection.selection_rows``)."""
    return None if r is None else {k: r[k] for k in _SELECTION_KEYS}


def _cost_doc(r: dict | None) -> dict:
    """A round's ``tokens``, ``compute_s`` and ``wall_s`` for ``ratchet status --format json`` (``store.costs``)."""
    return {} if r is None else {k: r[k] for k in ("tokens", "compute_s", "wall_s")}


def cost_line(c: dict) -> str:
    """One line: a campaign's tokens, compute and wall time, promoted points and the cost per point."""
    head = f"cost: {c['tokens']:,.0f} tokens, {c['compute_s'] / 60:.1f} compute min, {c['wall_s'] / 60:.1f} wall min"
    if c["tokens_per_point"] is None:
        return f"{head}; no promoted gain yet"
    return (
        f"{head}; {c['promoted_points']:+.1f} points of promoted pass@1: {c['tokens_per_point']:,.0f} tokens, "
        f"{c['compute_s_per_point'] / 60:.1f} compute min, {c['wall_s_per_point'] / 60:.1f} wall min per point"
    )


def confirmed_line(index: int, sets: dict[str, dict]) -> str:
    """One line: a promoted round's confirmed pass@1 per eval set beside the set's gating score."""
    parts = [f"{name} {v['confirmed_pass1']:.3f} (gating {v['candidate_pass1']:.3f})" for name, v in sets.items()]
    return f"round {index} confirmed pass@1 per set: " + ", ".join(parts)


def _has_column(con, table: str, column: str) -> bool:
    """Whether a (read-only, possibly older) store's table has the column."""
    sql = "SELECT count(*) FROM information_schema.columns WHERE table_name = ? AND column_name = ?"
    return bool(con.execute(sql, [table, column]).fetchone()[0])
