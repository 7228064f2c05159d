"""``ratchet reverify`` (re-score stored trajectories) and ``ratchet audit`` (the verifiers on labelled cases)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Optional

import typer

from ratchet.flows.cli.common import DB_HELP, PlainConsole, cell, console, fail, plain_table


def reverify(
    db: Optional[Path] = typer.Option(None, "--db", help=DB_HELP + " Default: the --config's db, else ratchet.duckdb."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Campaign config whose db and run_dir to use."),
    campaign: Optional[str] = typer.Option(
        None, "--campaign", help="Which campaign, when the config declares several [[campaigns]]."
    ),
    run_dir: Optional[Path] = typer.Option(
        None, "--run-dir", help="Where the new verdicts' Parquet goes. Default: the config's run_dir, else <db>.runs."
    ),
    format: str = typer.Option("table", "--format", help="table | json"),
) -> None:
    """Re-score stored trajectories with the current verifier version (adds verdict rows, never overwrites)."""
    from ratchet.flows.rounds.state.reverify import reverify as run_reverify
    from ratchet.loop.config import ConfigError, load_config
    from ratchet.store.db import StoreError

    if format not in ("table", "json"):
        fail(f"--format {format!r} is not one of table, json")
    if config is not None:
        try:
            cfg = load_config(config, db=str(db) if db else None, campaign=campaign)
        except ConfigError as e:
            fail(str(e))
        db, run_dir = Path(cfg.db), run_dir or cfg.resolved_run_dir()
    db = db or Path("ratchet.duckdb")
    try:
        with console.status("re-scoring stored trajectories…"):
            res = run_reverify(db, run_dir=run_dir)
    except StoreError as e:
        fail(str(e))
    if format == "json":
        print(json.dumps(res))
        return
    f = res["flips"]
    console.print(
        f"verifier {res['version']}: re-scored {res['rescored']} trajectories, {res['inserted']} new verdict rows; "
        f"flips: {f['wrong->right']} wrong→right, {f['right->wrong']} right→wrong, {f['unchanged']} unchanged, "
        f"{f['new']} had no verdict",
        highlight=False,
    )


def audit(
    cases: Path = typer.Argument(..., help="JSONL of labelled verifier cases."),
    format: str = typer.Option("table", "--format", help="table | json"),
) -> None:
    """Run the verifiers over labelled cases; exit 1 if any false positive."""
    from ratchet.verifiers.audit import CasesFileError, audit_exit_code, audit_json, run_audit
    from ratchet.verifiers.code.sandbox import SandboxUnavailable

    if format not in ("table", "json"):
        fail(f"--format {format!r} is not one of table, json")
    if not cases.exists():
        fail(f"no cases file at {cases}; pass the path of a JSONL file of labelled cases")
    if cases.is_dir():
        fail(f"{cases} is a directory; pass the path of a JSONL file of labelled cases inside it")
    try:
        report = run_audit(cases)
    except (CasesFileError, SandboxUnavailable) as e:
        fail(str(e))
    except UnicodeDecodeError as e:
        fail(f"{cases} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); save it as UTF-8 JSONL")
    except OSError as e:
        fail(f"cannot read {cases} ({e.strerror}); pass a readable JSONL file")
    if format == "json":
        print(audit_json(report))
    else:
        print(audit_text(report), end="")
    raise typer.Exit(audit_exit_code(report))


def audit_text(report: dict) -> str:
    """The audit report as plain-text tables: counts by kind, then each miss (reasons shown literally)."""
    cols = ["total", "passed", "true_positives", "true_negatives", "false_positives", "false_negatives", "errors"]
    table = plain_table("kind", *(c.replace("_", " ") for c in cols), title="verifier audit")
    for kind, counts in report["by_kind"].items():
        table.add_row(*map(cell, [kind, *(counts[c] for c in cols)]))
    table.add_row(*map(cell, ["all", *(report[c] for c in cols)]), style="bold")
    out = PlainConsole(file=io.StringIO(), width=140, force_terminal=False, color_system=None)
    out.print(table)
    out.print(cell(f"code sandbox isolation: {report.get('isolation', 'kernel')}"))
    if report["misses"]:
        misses = plain_table("id", "kind", "expected", "got", "reason", title="misses")
        for m in report["misses"]:
            misses.add_row(*map(cell, [m["id"], m["kind"], m["expected"], m["got"], m["reason"]]))
        out.print(misses)
    else:
        out.print("no misses")
    return out.file.getvalue()


def register(app: typer.Typer) -> None:
    """Add ``reverify`` and ``audit`` to the main CLI."""
    app.command("reverify")(reverify)
    app.command("audit")(audit)
