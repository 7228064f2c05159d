"""``ratchet campaign halt|pause|resume`` (events a person records in the store) and ``ratchet export``."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Optional

import typer

from ratchet.flows.cli.common import DB_HELP, console, fail

campaign_app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None, help="Halt, pause or resume a campaign (recorded in the store)."
)

NOT_SETTINGS = ("db", "run_dir", "max_rounds", "schedule", "retention", "campaign")
REASON_HELP = "Why (stored with who and when; shown in `ratchet status`, the report and the UI)."


def _record(db: Path, name: str, action: str, reason: str, changes: dict | None = None) -> None:
    from ratchet.store.db import StoreError, transaction
    from ratchet.store.events import record_event
    from ratchet.store.queries import campaign_by_name

    if not Path(db).exists():
        fail(f"no store at {db}; pass the --db of a Ratchet store")
    try:
        with transaction(db) as con:
            c = campaign_by_name(con, name)
            if c is None:
                names = [r[0] for r in con.execute("SELECT name FROM campaigns ORDER BY name").fetchall()]
                raise ValueError(f"no campaign {name!r} in {db}; campaigns: {', '.join(names) or 'none'}")
            if changes:
                _check_changes(c["config"], changes)
            row = record_event(con, c["campaign_id"], action, reason, settings={"set": changes} if changes else None)
    except (StoreError, ValueError) as e:
        fail(str(e))
    after = row["after_round_index"]
    console.print(f"{name}: {action} recorded by {row['actor']} after round {after}: {row['reason']}", highlight=False)
    from ratchet.flows.rounds.state.identity import dotted

    for key, value in (changes or {}).items():
        console.print(f"  from round {after + 1}: {key} = {value!r} (was {dotted(c['config'], key)!r})", highlight=False)


def _check_changes(stored: dict, changes: dict) -> None:
    """Only campaign settings the store holds can change, to values the config accepts (ConfigError, one line)."""
    from ratchet.flows.rounds.state.resumed_settings import with_settings
    from ratchet.loop.config import ConfigError, RatchetConfig

    for key in changes:
        if key.split(".")[0] in NOT_SETTINGS or key.split(".")[0] not in stored:
            raise ConfigError(
                f"--set {key}: not a setting of this campaign (its settings: {', '.join(sorted(stored))}; "
                "schedule, retention and max_rounds are changed in the config file, not by a resume)"
            )
    with_settings(RatchetConfig.model_validate({**stored, "campaign": stored.get("campaign", "x")}), changes)


@campaign_app.command("halt")
def campaign_halt(
    name: str = typer.Argument(..., help="Campaign name."),
    reason: str = typer.Option(..., "--reason", help=REASON_HELP),
    db: Path = typer.Option(Path("ratchet.duckdb"), "--db", help=DB_HELP),
) -> None:
    """Stop the campaign: no new round starts until `ratchet campaign resume` (a running round finishes)."""
    _record(db, name, "halt", reason)


@campaign_app.command("pause")
def campaign_pause(
    name: str = typer.Argument(..., help="Campaign name."),
    reason: str = typer.Option(..., "--reason", help=REASON_HELP),
    db: Path = typer.Option(Path("ratchet.duckdb"), "--db", help=DB_HELP),
) -> None:
    """Pause the campaign (scheduled runs start no round) until `ratchet campaign resume`."""
    _record(db, name, "pause", reason)


@campaign_app.command("resume")
def campaign_resume(
    name: str = typer.Argument(..., help="Campaign name."),
    reason: str = typer.Option(..., "--reason", help=REASON_HELP),
    db: Path = typer.Option(Path("ratchet.duckdb"), "--db", help=DB_HELP),
    set_: Optional[list[str]] = typer.Option(
        None, "--set", help="KEY=VALUE: change a campaign setting from the next round on, e.g. --set grpo.lr=3e-6 (repeatable)."
    ),
    reshuffle: bool = typer.Option(False, "--reshuffle", help="Draw a new tasks.seed: later rounds train on other prompts."),
) -> None:
    """Lift a halt (the gate's or a person's) or a pause; the count of rejections in a row starts again at 0.

    `--set KEY=VALUE` (repeatable) changes a campaign setting for every later round; `--reshuffle`
    draws a new `tasks.seed`, so later rounds train on a new draw of prompts (the eval set stays pinned).
    """
    from ratchet.flows.rounds.state.resumed_settings import parse_set
    from ratchet.loop.config import SEED_MAX, ConfigError

    try:
        changes = parse_set(list(set_ or []))
    except ConfigError as e:
        fail(str(e))
    if reshuffle:
        changes["tasks.seed"] = secrets.randbelow(SEED_MAX)
    _record(db, name, "resume", reason, changes)


def gc(
    db: Path = typer.Option(Path("ratchet.duckdb"), "--db", help=DB_HELP),
    run_dir: Optional[Path] = typer.Option(
        None, "--run-dir", help="The campaigns' run directory (default: the db path without suffix + '.runs')."
    ),
    keep_last: int = typer.Option(
        2, "--keep-last", min=1, help="Promoted checkpoints kept besides base, incumbent and best-ever."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would be deleted; delete nothing."),
    compact: bool = typer.Option(
        False, "--compact", help="Also merge each table's Parquet snapshot files, so readers' queries stay fast (docs/store.md)."
    ),
) -> None:
    """Apply the retention policy to every campaign of the store: one line per deleted checkpoint, then the total.

    `--compact` then merges the store's snapshot files (a line per table merged); rounds do it on their own once a
    table has `retention.compact_after_files` files.
    """
    from ratchet.store.catalog import COMPACT_DELAY_S, KEEP_VERSIONS_S
    from ratchet.store.catalog import compact as compact_store
    from ratchet.store.db import StoreError, connect, transaction
    from ratchet.store.retention import apply_plan, retention_plan

    root = (run_dir or Path(db).with_suffix(".runs")) / "checkpoints"
    try:
        with connect(db, read_only=True) as con:
            ids = [r[0] for r in con.execute("SELECT campaign_id FROM campaigns ORDER BY created_at").fetchall()]
        with transaction(db) as con:
            plan = [d for cid in ids for d in retention_plan(con, cid, root, keep_last)]
            freed = sum(d.bytes for d in plan) if dry_run else apply_plan(con, plan)
    except StoreError as e:
        fail(str(e))
    for d in plan:
        console.print(
            f"{'would delete' if dry_run else 'deleted'} {d.checkpoint_id} (round {d.round_index}, {d.why}) {d.path}",
            highlight=False,
        )
    console.print(f"{len(plan)} checkpoint(s), {freed / 1e6:.1f} MB {'would be ' if dry_run else ''}freed", highlight=False)
    if compact and not dry_run:
        try:
            with connect(db) as con:
                merged = compact_store(con, db)
        except StoreError as e:
            fail(str(e))
        for table, (before, after) in merged.items():
            console.print(
                f"compacted {table}: {before} Parquet files to {after}, read as such in {COMPACT_DELAY_S:.0f} s; "
                f"the files it merged are deleted by the first write {(COMPACT_DELAY_S + KEEP_VERSIONS_S) / 60:.0f} min from now",
                highlight=False,
            )
        if not merged:
            console.print("compaction: every table is in one file or too few to merge", highlight=False)
    elif compact:
        console.print("compaction skipped (--dry-run): it deletes nothing, but writes new files", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``campaign``, ``export`` and ``gc`` to the main CLI."""
    from ratchet.flows.cli.reading.export_command import export

    app.add_typer(campaign_app, name="campaign")
    app.command("export")(export)
    app.command("gc")(gc)
